"""StreamPipeline's report of a run, saved by the profiler in the run's directory, read back for the HTML report."""

from __future__ import annotations

from collections.abc import Sequence

from lightning_streamprof import names
from lightning_streamprof.results import RunResults


def run_directory(run: RunResults) -> str | None:
    """The run's directory (``<run dir>/<window dir>/<trace>``), when its traces are laid out by the profiler."""
    for window in run.windows:
        for rank in window.ranks:
            for t in rank.traces:
                parts = t.path.rstrip("/").rsplit("/", 2)
                if run.run and len(parts) == 3 and parts[0].rstrip("/").rsplit("/", 1)[-1] == run.run:
                    return parts[0]
    return None


def read_pipeline_notes(runs: Sequence[RunResults]) -> dict[str | None, str]:
    """``{run: StreamPipeline's report}`` for the runs whose directory holds one."""
    import fsspec

    out: dict[str | None, str] = {}
    for run in runs:
        directory = run_directory(run)
        if directory is None:
            continue
        try:
            with fsspec.open(f"{directory}/{names.PIPELINE_NOTES_FILE}", "r", encoding="utf-8") as f:
                out[run.run] = f.read().strip()
        except (FileNotFoundError, OSError):
            continue
    return out
