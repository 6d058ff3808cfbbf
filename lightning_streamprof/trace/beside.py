"""Files beside a run's traces: StreamPipeline's report, saved by the profiler in the run's directory, read back for
the HTML report as a trace is read (bounded, regular files only)."""

from __future__ import annotations

from collections.abc import Sequence

from lightning_streamprof import names
from lightning_streamprof.results import RunResults
from lightning_streamprof.trace.remote import read_text
from lightning_streamprof.trace.table import TraceFormatError


def run_directory(run: RunResults) -> str | None:
    """The run's directory (``<run dir>/<window dir>/<trace>``), when its traces are laid out by the profiler."""
    for window in run.windows:
        for rank in window.ranks:
            for t in rank.traces:
                parts = t.path.rstrip("/").rsplit("/", 2)
                if run.run and len(parts) == 3 and parts[0].rstrip("/").rsplit("/", 1)[-1] == run.run:
                    return parts[0]
    return None


#: StreamPipeline's report is a few hundred lines at the most; a larger file is not one
NOTES_LIMIT = 1 << 20


def read_pipeline_notes(runs: Sequence[RunResults]) -> tuple[dict[str | None, str], list[str]]:
    """``{run: StreamPipeline's report}`` for the runs whose directory holds one, and one line for each such file
    that could not be read (not a regular file, too large, not UTF-8: it is read as a trace is)."""
    out: dict[str | None, str] = {}
    problems: list[str] = []
    for run in runs:
        directory = run_directory(run)
        if directory is None:
            continue
        path = f"{directory}/{names.PIPELINE_NOTES_FILE}"
        try:
            out[run.run] = read_text(path, NOTES_LIMIT).strip()
        except TraceFormatError as err:
            if err.reason != "no such file or directory":
                problems.append(f"StreamPipeline's report left out: {err}")
    return out, problems
