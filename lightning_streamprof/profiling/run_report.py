"""What the profiler leaves at the end of a stage beside the traces: the run's HTML report, StreamPipeline's
report, and the commands to run next."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
import warnings
from collections.abc import Mapping, Sequence

import msgspec
from fsspec.core import split_protocol

from lightning_streamprof import names
from lightning_streamprof.profiling.exporter import WindowResult
from lightning_streamprof.profiling.storage import join_path, write_atomic
from lightning_streamprof.report.cost import ProfilingCost
from lightning_streamprof.results import RunResults, WindowResults


def run_results(windows: Sequence[WindowResult], run: str | None) -> RunResults | None:
    """This process's analysed windows as a run (windows in order, merged with the rules applied); None
    without an analysed window."""
    from lightning_streamprof.analysis import combine

    done = sorted((w for w in windows if w.analysis is not None), key=lambda w: w.window)
    if not done:
        return None
    results = [w.analysis for w in done if w.analysis is not None]
    merged = msgspec.structs.replace(combine(results, run), runs=[run] if run else [])
    return RunResults(run=run, merged=merged, windows=[
        WindowResults(window=w.window, first_step=w.first_step, ranks=[w.analysis]) for w in done if w.analysis])


def with_other_ranks(run: RunResults, windows: Sequence[WindowResult], world_size: int,
                     seconds: float) -> tuple[RunResults, list[str]]:
    """``run`` (this rank's windows) with the other ranks' traces of the same windows, read from beside this
    rank's (a shared directory or store) for at most ``seconds``; a note names the traces it could not add."""
    from lightning_streamprof.analysis import combine
    from lightning_streamprof.api import analyze_file

    deadline = time.monotonic() + seconds
    own = {w.window: w.path for w in windows}
    missing: dict[int, list[int]] = {}
    unread: list[str] = []
    out = []
    for w in run.windows:
        ranks = {r.traces[0].rank: r for r in w.ranks}
        path = own.get(w.window)
        if path is not None and time.monotonic() < deadline:
            others: list[str] = []
            try:
                others = _beside(path)
            except Exception as err:  # noqa: BLE001 - the report then holds this rank's traces
                unread.append(f"{path}: {err}")
            for other in others:
                if time.monotonic() >= deadline:
                    break
                try:
                    result = analyze_file(other)
                except Exception as err:  # noqa: BLE001 - one unreadable trace leaves the others in
                    unread.append(f"{other}: {err}")
                    continue
                ident = result.traces[0]
                if ident.run == run.run and ident.window == w.window and ident.rank not in ranks:
                    ranks[ident.rank] = result
        missing_here = [r for r in range(world_size) if r not in ranks]
        if missing_here:
            missing[w.window] = missing_here
        out.append(msgspec.structs.replace(w, ranks=[ranks[r] for r in sorted(ranks, key=lambda r: r or 0)]))
    every = [r for w in out for r in w.ranks]
    merged = msgspec.structs.replace(combine(every, run.run), runs=[run.run] if run.run else [])
    notes = []
    if missing:
        listed = "; ".join(f"window {w}: rank(s) {', '.join(map(str, r))}" for w, r in sorted(missing.items()))
        notes.append(f"Traces not found beside this rank's within {seconds:.0f} s (another host's disk, or not yet"
                     f" written): {listed}. `streamprof report <run directory>` on storage every rank writes to"
                     " reads them all, and `streamprof report DIR_HOST1 DIR_HOST2 ...` merges each host's.")
    notes += [f"Could not read {u}" for u in unread[:3]]
    return msgspec.structs.replace(run, windows=out, merged=merged), notes


def _beside(path: str) -> list[str]:
    """The other traces in the directory of the trace at ``path`` (a local path or fsspec URL)."""
    from lightning_streamprof.api import find_traces

    def name(p: str) -> str:
        return p.replace("\\", "/").rsplit("/", 1)[-1]

    directory = path.rsplit("/", 1)[0] if "/" in path else os.path.dirname(path)
    return [p for p in find_traces(directory)[0] if name(p) != name(path)]


def _write(path: str, text: str) -> None:
    """Through a temporary name: an earlier file survives a failed write, and none is left cut off or empty."""
    write_atomic(path, text.encode("utf-8"))


def write_run_files(run_dir: str, run: RunResults, *, pipeline_text: str | None, notes: Sequence[str],
                    cost: ProfilingCost | None = None, outside: Sequence[str] = ()) -> str | None:
    """Write ``report.html`` (and StreamPipeline's report, when there is one) in ``run_dir``; returns the
    report's path, or None (with a warning) when it could not be written. ``outside``: what the fit spent outside
    its training steps."""
    from lightning_streamprof.report.html import render_report

    path = join_path(run_dir, names.REPORT_FILE)
    try:
        if pipeline_text:
            _write(join_path(run_dir, names.PIPELINE_NOTES_FILE), pipeline_text + "\n")
        _write(path, render_report([run], run_dir, pipeline={run.run: pipeline_text} if pipeline_text else None,
                                   notes=notes, cost=cost, outside=outside))
    except Exception as err:  # noqa: BLE001 - the run is over; a missing report is a warning
        warnings.warn(f"StreamProfiler: could not write the HTML report {path}: {err}", stacklevel=2)
        return None
    return path


#: a summary file grows by a few kilobytes a stage; one larger than this is not one to append to
_SUMMARY_LIMIT = 16 << 20


def append_summary(path: str, text: str) -> None:
    """Append ``text`` to the summary file at ``path`` (``filename=``), as Lightning's profilers do, but through a
    temporary name (what the file held survives a failed write) and never into a FIFO, a device or a directory; a
    problem is a warning, the run goes on."""
    from lightning_streamprof.errors import describe
    from lightning_streamprof.trace import TraceFormatError
    from lightning_streamprof.trace.remote import read_text

    try:
        try:
            earlier = read_text(path, _SUMMARY_LIMIT)
        except TraceFormatError as err:
            if err.reason != "no such file or directory":
                raise
            earlier = ""
        write_atomic(path, (earlier + text).encode("utf-8"))
    except Exception as err:  # noqa: BLE001 - the run is over; a missing summary is a warning
        reason = err.reason if isinstance(err, TraceFormatError) else describe(err)
        warnings.warn(f"StreamProfiler: could not write the summary {path}: {reason}", stacklevel=2)


#: fsspec protocols whose files live in this process only: no other process (a command, a browser) can read them
_IN_PROCESS = ("memory",)


def next_commands(run_dir: str, report: str | None, log_dirs: Sequence[str] = ()) -> list[str]:
    """The lines that end the summary: where the report is and what to run next (for traces kept in this process's
    memory, what works there instead, and why)."""
    lines = []
    tensorboard = command("tensorboard")
    if split_protocol(run_dir)[0] in _IN_PROCESS:
        lines.append(f"The traces and the report are in this process's memory ({run_dir}): another process (the"
                     " streamprof command, a browser) cannot read them, and they go when this process ends.")
        lines.append("Next, in this process:")
        lines.append(f"  lightning_streamprof.analyze({run_dir!r})")
        lines += [f"  {tensorboard} --logdir {d}" for d in log_dirs if split_protocol(d)[0] not in _IN_PROCESS]
        return lines
    if report:
        lines.append(f"HTML report (open it in a browser): {report}")
    lines.append("Next:")
    streamprof = command("streamprof")
    lines.append(f"  {streamprof} analyze {shlex.quote(run_dir)}")
    lines.append(f"  {streamprof} report {shlex.quote(run_dir)} -o report.html")
    lines += [f"  {tensorboard} --logdir {shlex.quote(d)}" for d in log_dirs]
    return lines


def command(name: str) -> str:
    """``name`` when the shell finds it, else its path beside this Python (a virtual environment not activated)."""
    if shutil.which(name):
        return name
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.exists(beside):
        relative = os.path.relpath(beside)
        return relative if not relative.startswith("..") else beside
    return name


def moved_notes(moves: Mapping[int, int], windows: Sequence[WindowResult]) -> list[str]:
    """One line per window that the overhead budget moved."""
    from lightning_streamprof.report.summary import moved_note

    notes = (moved_note(w.window, w.first_step, moves.get(w.window)) for w in sorted(windows, key=lambda w: w.window))
    return [n for n in notes if n]
