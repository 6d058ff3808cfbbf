"""What the profiler shows of a stage's run, rendered by :mod:`lightning_streamprof.report` (the one module of the
profiler that imports the renderers): each window's markdown for TensorBoard, the summary with the commands to run
next, and at the end of the stage the run's HTML report and StreamPipeline's report beside the traces."""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
import warnings
from collections.abc import Mapping, Sequence

from fsspec.core import split_protocol

from lightning_streamprof import names
from lightning_streamprof.profiling.exporter import WindowResult
from lightning_streamprof.profiling.run_results import run_results, with_other_ranks
from lightning_streamprof.profiling.storage import join_path, write_atomic
from lightning_streamprof.report.cost import cost_sentence
from lightning_streamprof.report.markdown import window_markdown
from lightning_streamprof.report.slowdown import explanation_sentence, explanation_text, stall_lines, trigger_note
from lightning_streamprof.report.summary import moved_note, render_windows, waited_note, way_note
from lightning_streamprof.results import ChoiceWait, DistributedStats, PipelineRun, ProfilingCost, Result, RunResults
from lightning_streamprof.results.memory_snapshot import SnapshotMemory
from lightning_streamprof.results.triggers import RunTriggers

#: windows (and distributed windows) the summary shows: the latest, so that it stays short in a long run
SUMMARY_WINDOWS = 3


class RunReporter:
    """Renders one stage's run ``run_name`` (in ``run_dir``) as global rank ``rank`` of ``world_size`` sees it; the
    HTML report is written once, by rank 0, with the other ranks' traces that it can read within ``timeout``."""

    def __init__(self, run_name: str, run_dir: str, rank: int, world_size: int, *, row_limit: int,
                 timeout: float) -> None:
        self.run_name, self.run_dir, self.rank, self.world_size = run_name, run_dir, rank, world_size
        self.row_limit, self.timeout = row_limit, timeout
        self.report_path: str | None = None
        self.run: RunResults | None = None  # the report's run, for the summary's recommendations
        self._written = False

    def window_text(self, analysis: Result, window: WindowResult, planned: int | None,
                    cost: ProfilingCost | None, wait: ChoiceWait | None = None,
                    pipeline: PipelineRun | None = None, triggered: RunTriggers | None = None) -> str:
        """A window's ``analysis`` as markdown (``planned``: its first step before the overhead budget moved it;
        ``wait``: how long it waited for a staging callback's choice; ``triggered``: why windows were recorded off
        the schedule), its recommendations given what the run's StreamPipeline does now (``pipeline``, its own
        state)."""
        why = [] if triggered is None else [
            trigger_note(window.window, triggered.triggers.get(window.window)),
            *(explanation_sentence(e) for e in triggered.explained if e.window == window.window)]
        return window_markdown(advised(analysis, pipeline), window.window, window.first_step, window.last_step,
                               moved=moved_note(window.window, window.first_step, planned), path=window.path,
                               cost=cost_sentence(cost) if cost is not None else None,
                               notes=[n for n in (*why, waited_note(wait), way_note(window.window, window.pipeline))
                                      if n])

    def write(self, windows: Sequence[WindowResult], written: int, moves: Mapping[int, int], *,
              cost: ProfilingCost | None, notes: Sequence[str], pipeline_text: str, outside: Sequence[str],
              waits: Mapping[int, ChoiceWait] | None = None, pipeline: PipelineRun | None = None,
              triggered: RunTriggers | None = None, snapshots: Sequence[SnapshotMemory] = ()) -> None:
        """On rank 0, once: ``report.html`` of the analysed ``windows`` (of ``written`` in all), with ``notes`` after
        the budget's moves and the waits for a staging callback's choice, the recommendations given what the run's
        StreamPipeline does (``pipeline``, its own state), and StreamPipeline's report (``pipeline_text``) beside it."""
        if not self.due:
            return
        run = run_results(windows, self.run_name, pipeline)
        if run is None:
            return
        self._written = True
        notes = [*moved_notes(moves, windows, waits), *notes]
        if len(run.windows) < written:
            notes.append(f"This report holds the last {len(run.windows)} analysed of the {written} windows "
                         f"written; `streamprof report {self.run_dir}` reads them all.")
        if self.world_size > 1:  # the other ranks' traces of the same windows, where this rank can read them
            run, found = with_other_ranks(run, windows, self.world_size, self.timeout)
            notes += found
        self.report_path = write_run_files(self.run_dir, run, pipeline_text=pipeline_text or None, notes=notes,
                                           cost=cost, outside=outside, triggered=triggered, snapshots=snapshots)
        self.run = run

    @property
    def due(self) -> bool:
        """The report is this rank's to write and not written yet."""
        return self.rank == 0 and not self._written

    def summary(self, windows: Sequence[WindowResult], written: int, moves: Mapping[int, int], *,
                cost: ProfilingCost | None, problems: Sequence[str], outside: Sequence[str],
                distributed: Sequence[DistributedStats], reports: Sequence[str], log_dirs: Sequence[str],
                waits: Mapping[int, ChoiceWait] | None = None, pipeline: PipelineRun | None = None,
                triggered: RunTriggers | None = None) -> str:
        """The last windows' results, why windows were recorded off the schedule, each slowdown against the last
        normal window, the single stalls (``triggered``), what went wrong (``problems``), what the fit spent
        ``outside`` its training steps, the last distributed windows, the callbacks' ``reports`` and the commands to run next; before the
        run's report, each window's recommendations given what the run's StreamPipeline does now (``pipeline``)."""
        problems = [f"StreamProfiler: {line}" for line in problems]
        if not windows:
            return "\n".join(["StreamProfiler: no window was recorded.", *triggered_lines(triggered), *problems,
                              *outside, *reports])
        footer = [*triggered_lines(triggered), *problems, *outside]
        if distributed:
            from lightning_streamprof.report.text import render_distributed

            footer += [render_distributed(d, top=self.row_limit) for d in distributed[-SUMMARY_WINDOWS:]]
        footer += [*reports, *next_commands(self.run_dir, self.report_path, log_dirs)]
        if self.run is None and pipeline is not None:
            windows = [dataclasses.replace(w, analysis=advised(w.analysis, pipeline)) if w.analysis else w
                       for w in windows]
        return render_windows(windows, rank=self.rank, cost=cost, row_limit=self.row_limit, total=written,
                              shown=SUMMARY_WINDOWS, run=self.run, moves=moves, waits=waits, footer=footer,
                              triggers=triggered.triggers if triggered else None)


def triggered_lines(triggered: RunTriggers | None) -> list[str]:
    """Each slowdown against the last normal window (the sentence, then its table), the stalls, and why the watch
    is off where it is."""
    if triggered is None:
        return []
    lines = [explanation_text(e) for e in triggered.explained[-SUMMARY_WINDOWS:]]
    lines += stall_lines(triggered.stalls, triggered.more_stalls, triggered.stall_factor)
    return [*lines, *(f"StreamProfiler: {note}" for note in triggered.notes)]


def advised(analysis: Result, pipeline: PipelineRun | None) -> Result:
    """``analysis`` with its recommendations given what the run's StreamPipeline does (``pipeline``, its own state;
    as analysed without it)."""
    if pipeline is None:
        return analysis
    from lightning_streamprof.analysis import with_recommendations

    return with_recommendations(analysis, pipeline)


def _write(path: str, text: str) -> None:
    """Through a temporary name: an earlier file survives a failed write, and none is left cut off or empty."""
    write_atomic(path, text.encode("utf-8"))


def write_run_files(run_dir: str, run: RunResults, *, pipeline_text: str | None, notes: Sequence[str],
                    cost: ProfilingCost | None = None, outside: Sequence[str] = (),
                    triggered: RunTriggers | None = None, snapshots: Sequence[SnapshotMemory] = ()) -> str | None:
    """Write ``report.html`` (and StreamPipeline's report, when there is one) in ``run_dir``; returns the
    report's path, or None (with a warning) when it could not be written. ``outside``: what the fit spent outside
    its training steps."""
    from lightning_streamprof.report.html import render_report

    path = join_path(run_dir, names.REPORT_FILE)
    if triggered is not None:  # the single stalls beside what the fit spent outside its steps
        outside = [*outside, *stall_lines(triggered.stalls, triggered.more_stalls, triggered.stall_factor)]
    try:
        if pipeline_text:
            _write(join_path(run_dir, names.PIPELINE_NOTES_FILE), pipeline_text + "\n")
        _write(path, render_report([run], run_dir, pipeline={run.run: pipeline_text} if pipeline_text else None,
                                   notes=notes, cost=cost, outside=outside,
                                   explained=triggered.explained if triggered else None, snapshots=snapshots))
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


def moved_notes(moves: Mapping[int, int], windows: Sequence[WindowResult],
                waits: Mapping[int, ChoiceWait] | None = None) -> list[str]:
    """One line per window that the overhead budget moved, and one per window that waited for a staging callback's
    choice of way."""
    notes = (note for w in sorted(windows, key=lambda w: w.window)
             for note in (waited_note((waits or {}).get(w.window)), moved_note(w.window, w.first_step,
                                                                               moves.get(w.window))))
    return [n for n in notes if n]
