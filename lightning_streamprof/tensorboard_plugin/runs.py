"""The StreamProfiler runs under a TensorBoard log directory, found on local disk.

A run directory (``<dirpath>/<stage>-<time>``, by default ``<trainer.log_dir>/streamprof/``) holds the run's
``report.html`` and one ``w<window>-step<first step>/`` directory per window with each rank's
``rank<R>.<ns>.pt.trace.json.gz``. A directory is a run when it holds a report that StreamProfiler wrote or a window
with a trace. Only the files found here are ever served: a report or trace whose real path leaves the log directory
(a symbolic link) is not listed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time

from lightning_streamprof.names import REPORT_FILE

#: the window directories and the trace files in them, as the profiler names them
WINDOW_DIR = re.compile(r"^w(\d+)-step(\d+)$")
TRACE_FILE = re.compile(r"^rank(\d+)\.(?:\d+\.)?pt\.trace\.json(?:\.gz)?$")
#: ``<stage>-<YYYYmmdd>-<HHMMSS>.<ms>-<hex>``, the run directory's name
_RUN_NAME = re.compile(r"^(?P<stage>\w+?)-(?P<day>\d{8})-(?P<time>\d{6})\.\d{3}-[0-9a-f]{6}$")
#: what the head of a StreamProfiler report holds (its title)
_REPORT_MARK = b"<title>streamprof report"
#: directories looked into at most, so that a huge log directory answers in time
MAX_DIRS = 20_000


@dataclasses.dataclass(frozen=True)
class Trace:
    """One rank's trace of a window: ``file`` relative to the run directory, with ``/``."""

    rank: int
    file: str
    bytes: int


@dataclasses.dataclass(frozen=True)
class Window:
    window: int
    first_step: int
    traces: tuple[Trace, ...]


@dataclasses.dataclass(frozen=True)
class Run:
    """A run directory: ``id`` is its path under the log directory (with ``/``), ``path`` its absolute path."""

    id: str
    path: str
    stage: str | None
    started: str | None
    report: bool
    windows: tuple[Window, ...]
    modified: float

    @property
    def ranks(self) -> list[int]:
        return sorted({t.rank for w in self.windows for t in w.traces})

    def files(self) -> dict[str, Trace]:
        """The run's traces by their ``file``."""
        return {t.file: t for w in self.windows for t in w.traces}

    def to_json(self) -> dict:
        name = self.id.rsplit("/", 1)[-1]
        return {"id": self.id, "name": name, "where": self.id[: -len(name)].rstrip("/"), "stage": self.stage,
                "started": self.started, "report": self.report, "ranks": self.ranks,
                "windows": [dataclasses.asdict(w) for w in self.windows]}


def file_under(path: str, root: str) -> bool:
    """``path`` is a regular file whose real path is under ``root`` (a real path)."""
    return os.path.isfile(path) and os.path.realpath(path).startswith(root + os.sep)


def _is_report(path: str, root: str) -> bool:
    """``path`` is a file under ``root`` that StreamProfiler's report renderer wrote."""
    if not file_under(path, root):
        return False
    try:
        with open(path, "rb") as f:
            return _REPORT_MARK in f.read(1024)
    except OSError:
        return False


def _stat(path: str) -> os.stat_result | None:
    """``path``'s status, None when it went away meanwhile (a report renamed into place, a run removed)."""
    try:
        return os.stat(path)
    except OSError:
        return None


def _window(run_dir: str, name: str, root: str) -> Window | None:
    match = WINDOW_DIR.match(name)
    if not match:
        return None
    traces = []
    try:
        entries = sorted(os.scandir(os.path.join(run_dir, name)), key=lambda e: e.name)
    except OSError:
        return None
    for entry in entries:
        rank = TRACE_FILE.match(entry.name)
        status = _stat(entry.path) if rank and file_under(entry.path, root) else None
        if status is not None:
            traces.append(Trace(int(rank.group(1)), f"{name}/{entry.name}", status.st_size))
    return Window(int(match.group(1)), int(match.group(2)), tuple(traces)) if traces else None


def _run(path: str, subdirs: list[str], files: list[str], root: str, logdir: str) -> Run | None:
    report = REPORT_FILE in files and _is_report(os.path.join(path, REPORT_FILE), root)
    windows = [w for w in (_window(path, d, root) for d in sorted(subdirs)) if w is not None]
    if not (report or windows):
        return None
    name = os.path.basename(path)
    parsed = _RUN_NAME.match(name)
    started = None
    if parsed:
        day, clock = parsed.group("day"), parsed.group("time")
        started = f"{day[:4]}-{day[4:6]}-{day[6:]} {clock[:2]}:{clock[2:4]}:{clock[4:]}"
    rel = os.path.relpath(path, logdir).replace(os.sep, "/") if path != logdir else name
    times = [s.st_mtime for s in map(_stat, [path, *(os.path.join(path, f) for f in files)]) if s is not None]
    return Run(id=rel, path=path, stage=parsed.group("stage") if parsed else None, started=started, report=report,
               windows=tuple(sorted(windows, key=lambda w: w.window)), modified=max(times, default=0.0))


def find_runs(logdir: str) -> list[Run]:
    """The runs under ``logdir`` (a local directory), the latest first."""
    logdir, root = os.path.abspath(logdir), os.path.realpath(logdir)
    runs = []
    seen = 0
    for path, subdirs, files in os.walk(logdir):
        seen += 1
        if seen > MAX_DIRS:
            break
        subdirs[:] = [d for d in subdirs if not d.startswith(".")]
        run = _run(path, subdirs, files, root, logdir)
        if run is not None:
            runs.append(run)
            subdirs[:] = [d for d in subdirs if not WINDOW_DIR.match(d)]
    return sorted(runs, key=lambda r: (-r.modified, r.id))


class RunIndex:
    """The runs under a log directory, looked for again at most every ``ttl`` seconds (and when asked for one not
    seen yet)."""

    def __init__(self, logdir: str, ttl: float = 5.0) -> None:
        self.logdir, self.ttl = logdir, ttl
        self._runs: list[Run] = []
        self._at: float | None = None

    def runs(self, fresh: bool = False) -> list[Run]:
        if fresh or self._at is None or time.monotonic() - self._at > self.ttl:
            self._runs, self._at = find_runs(self.logdir), time.monotonic()
        return self._runs

    def get(self, run_id: str) -> Run | None:
        """The run named ``run_id`` (a run's ``id`` exactly, never a path to resolve)."""
        for fresh in (False, True):
            found = next((r for r in self.runs(fresh) if r.id == run_id), None)
            if found is not None:
                return found
        return None
