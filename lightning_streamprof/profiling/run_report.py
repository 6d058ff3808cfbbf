"""What the profiler leaves at the end of a stage beside the traces: the run's HTML report, StreamPipeline's
report, and the commands to run next."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Mapping, Sequence

import msgspec

from lightning_streamprof import names
from lightning_streamprof.profiling.exporter import WindowResult
from lightning_streamprof.profiling.storage import join_path
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


def _write(path: str, text: str) -> None:
    import fsspec

    with fsspec.open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_run_files(run_dir: str, run: RunResults, *, pipeline_text: str | None, notes: Sequence[str],
                    world_size: int = 1) -> str | None:
    """Write ``report.html`` (and StreamPipeline's report, when there is one) in ``run_dir``; returns the
    report's path, or None (with a warning) when it could not be written."""
    from lightning_streamprof.report.html import render_report

    if world_size > 1:
        notes = [*notes, f"This report holds rank 0's traces; `streamprof report {run_dir}` reads all "
                         f"{world_size} ranks."]
    path = join_path(run_dir, names.REPORT_FILE)
    try:
        if pipeline_text:
            _write(join_path(run_dir, names.PIPELINE_NOTES_FILE), pipeline_text + "\n")
        _write(path, render_report([run], run_dir, pipeline={run.run: pipeline_text} if pipeline_text else None,
                                   notes=notes))
    except Exception as err:  # noqa: BLE001 - the run is over; a missing report is a warning
        warnings.warn(f"StreamProfiler: could not write the HTML report {path}: {err}", stacklevel=2)
        return None
    return path


def next_commands(run_dir: str, report: str | None, log_dirs: Sequence[str] = ()) -> list[str]:
    """The lines that end the summary: where the report is and what to run next."""
    lines = []
    if report:
        lines.append(f"HTML report (open it in a browser): {report}")
    lines.append("Next:")
    streamprof, tensorboard = command("streamprof"), command("tensorboard")
    lines.append(f"  {streamprof} analyze {run_dir}")
    lines.append(f"  {streamprof} report {run_dir} -o report.html")
    lines += [f"  {tensorboard} --logdir {d}" for d in log_dirs]
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
