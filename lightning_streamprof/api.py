"""``analyze(path_or_url)``: one trace file, or a directory of them, to typed results (one run at a time)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import msgspec

from lightning_streamprof.results import Result, RunResults, WindowResults, group_runs
from lightning_streamprof.results.repeats import repeated
from lightning_streamprof.trace import remote
from lightning_streamprof.trace.identity import trace_identity
from lightning_streamprof.trace.reader import TraceFormatError, read_trace

#: ``progress(done, total, trace)``: how far :func:`analyze_runs` has read
Progress = Callable[[int, int, str], None]
#: one path or URL, or several of one run (per-host disks, prefixes)
Paths = str | os.PathLike | Sequence[str | os.PathLike]

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json", ".json.gz")


class SeveralRunsError(ValueError):
    """A path holds the traces of several runs and none was chosen; ``runs`` names them."""

    def __init__(self, path: str, runs: list[str]) -> None:
        super().__init__(f"{path}: holds {len(runs)} runs ({', '.join(runs)}); choose one with --run NAME (run=NAME)")
        self.path = path
        self.runs = runs


def find_traces(path: str) -> tuple[list[str], str | None]:
    """The traces at ``path`` (itself if a file, else every Kineto trace below it, sorted) and the directory
    they were searched under (None for a file); fsspec URLs work. Remote requests are bounded in time."""
    path = str(path)
    fs, local = remote.filesystem(path)
    info = remote.bounded(fs, path, lambda: fs.info(local), f"looking up {path}")
    if info.get("type") != "directory":
        return [path], None
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    prefix = "" if protocol in ("file", "local") else f"{protocol}://"
    every = remote.bounded(fs, path, lambda: fs.find(local), f"listing {path}")
    found = sorted(p for p in every if p.endswith(TRACE_SUFFIXES[:2]))
    if not found:
        found = sorted(p for p in every if p.endswith(TRACE_SUFFIXES[2:]))
    if not found:
        raise TraceFormatError(path, "directory holds no Kineto trace (*.pt.trace.json[.gz])")
    root = prefix + local.rstrip("/") if prefix and not local.startswith(prefix) else local.rstrip("/")
    return [prefix + p if prefix and not p.startswith(prefix) else p for p in found], root


def analyze_file(path: str, root: str | None = None) -> Result:
    """The result of one trace file, with its identity (run, window, rank, host)."""
    from lightning_streamprof.analysis import analyze_table

    table = read_trace(path)
    return analyze_table(table, trace_identity(path, table.metadata, root))


def as_paths(path: Paths) -> list[str]:
    """``path`` as a list of path strings (one path, or several)."""
    return [str(path)] if isinstance(path, (str, os.PathLike)) else [str(p) for p in path]


def label(path: Paths) -> str:
    """How messages name ``path``: the path, or the paths joined with `` + ``."""
    return " + ".join(as_paths(path))


def _analyze_each(found: list[tuple[str, str | None]],
                  progress: Progress | None = None) -> tuple[list[Result], list[TraceFormatError]]:
    """Every readable trace's result (each ``(trace, root)``), and the errors of the others (a single trace's error
    is raised).

    ``progress(done, total, trace)`` is called before each trace is read (``done`` read so far) and once at the end.
    """
    results, errors = [], []
    for i, (p, root) in enumerate(found):
        if progress is not None:
            progress(i, len(found), p)
        if len(found) == 1:
            results.append(analyze_file(p, root))
            continue
        try:
            results.append(analyze_file(p, root))
        except TraceFormatError as err:
            errors.append(err)
    if progress is not None:
        progress(len(found), len(found), "")
    if not results:
        first = errors[0]
        more = f" (and {len(errors) - 1} more unreadable traces)" if len(errors) > 1 else ""
        raise TraceFormatError(first.source, first.reason + more)
    return results, errors


def _find_all(paths: list[str]) -> tuple[list[tuple[str, str | None]], dict[str, int]]:
    """Every trace under each of ``paths`` with the directory it was found under, and which of the paths it was
    found under first; a file found twice (overlapping paths) once."""
    found: dict[str, str | None] = {}
    first: dict[str, int] = {}
    for i, p in enumerate(paths):
        traces, root = find_traces(p)
        for t in traces:
            found.setdefault(t, root)
            first.setdefault(t, i)
    return list(found.items()), first


def _one_per_rank(results: list[Result], source: dict[str, int]) -> tuple[list[Result], list[str]]:
    """Results with one trace per (run, window, global rank) across the paths given: a rank's window found under
    a second path (a copy on another host's disk) is left out and named. Repeats under one path stay: two runs
    wrote into one directory under one name (:func:`~lightning_streamprof.results.repeats.repeated` names them)."""
    seen: dict[tuple, tuple[int, str]] = {}
    kept, notes = [], []
    for r in results:
        t = r.traces[0]
        key, where = (t.run, t.window, t.rank), source.get(t.path, 0)
        if t.rank is not None and key in seen and seen[key][0] != where:
            notes.append(f"{t.path}: skipped: rank {t.rank} of window {t.window} is already read from {seen[key][1]}")
            continue
        seen.setdefault(key, (where, t.path))
        kept.append(r)
    return kept, notes


def analyze_runs(path: Paths, progress: Progress | None = None) -> list[RunResults]:
    """Every run under ``path`` (one directory, file or URL, or several of one run: each host's disk, prefixes):
    its windows, each window's ranks, and the run's traces merged. The traces of every path are merged by run,
    window and global rank (a rank's window found under two of the paths is read once).

    A trace that cannot be read is left out and named in the ``warnings`` of its run's result (of every run's
    when its run is unknown); so is a window or a step that a rank has twice in one run (two runs written into one
    directory under one name). :class:`TraceFormatError` when no trace can be read.
    ``progress(done, total, trace)`` is called before each trace is read (``done`` read so far) and once at the end.
    """
    from lightning_streamprof.analysis import combine

    found, source = _find_all(as_paths(path))
    results, errors = _analyze_each(found, progress)
    results, duplicates = _one_per_rank(results, source)
    roots = dict(found)
    runs = []
    for run, windows in group_runs(results).items():
        every = [r for ranks in windows.values() for r in ranks]
        merged = combine(every, run)
        runs.append(RunResults(
            run=run,
            windows=[WindowResults(window=w, first_step=ranks[0].traces[0].first_step, ranks=ranks)
                     for w, ranks in windows.items()],
            merged=merged,
        ))
    names = [r.run or "" for r in runs]
    out = []
    for r in runs:
        skipped = [f"{e.source}: skipped: {e.reason}" for e in errors
                   if (owner := trace_identity(e.source, {}, roots.get(e.source)).run) == r.run or owner not in names]
        twice = repeated(r.run, [t for w in r.windows for t in w.ranks])
        merged = msgspec.structs.replace(r.merged, runs=names,
                                         warnings=[*r.merged.warnings, *twice, *skipped, *duplicates])
        out.append(msgspec.structs.replace(r, merged=merged))
    return out


def select_run(runs: list[RunResults], run: str | None, path: Paths) -> Result:
    """The merged result of ``run`` (or of the only run); :class:`SeveralRunsError` when a choice is needed."""
    names = [r.run or "" for r in runs]
    if run is None:
        if len(runs) > 1:
            raise SeveralRunsError(label(path), names)
        return runs[0].merged
    for r in runs:
        if r.run == run:
            return r.merged
    raise TraceFormatError(label(path), f"no run named {run!r} (runs: {', '.join(names)})")


def analyze(path: Paths, run: str | None = None) -> Result:
    """Analyse a trace file, or every trace of one run in a directory (local path or fsspec URL), or in several
    directories of one run (a list: each host's disk, or prefixes): merged by run, window and global rank.

    A directory's traces are grouped by run (the profiler's ``<stage>-<time>`` directory, else the directory
    that holds them); the result merges the traces of ``run``, or of the only run (a directory with several
    runs raises :class:`SeveralRunsError` without ``run``; :func:`analyze_runs` gives every run).
    Raises :class:`TraceFormatError` naming the file for anything that is not a readable Kineto trace; in a
    directory, unreadable traces are skipped and named in the result's ``warnings``. Remote stores get
    ``$STREAMPROF_IO_TIMEOUT`` seconds (30) per request.
    """
    return select_run(analyze_runs(path), run, path)
