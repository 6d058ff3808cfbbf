"""``analyze(path_or_url)``: one trace file, or a directory of them, to typed results (one run at a time)."""

from __future__ import annotations

import os
from collections.abc import Callable

import msgspec
from fsspec.core import url_to_fs

from lightning_streamprof.results import Result, RunResults, WindowResults, group_runs
from lightning_streamprof.trace.identity import trace_identity
from lightning_streamprof.trace.reader import TraceFormatError, read_trace

#: ``progress(done, total, trace)``: how far :func:`analyze_runs` has read
Progress = Callable[[int, int, str], None]

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json", ".json.gz")


class SeveralRunsError(ValueError):
    """A path holds the traces of several runs and none was chosen; ``runs`` names them."""

    def __init__(self, path: str, runs: list[str]) -> None:
        super().__init__(f"{path}: holds {len(runs)} runs ({', '.join(runs)}); choose one with --run NAME (run=NAME)")
        self.path = path
        self.runs = runs


def find_traces(path: str) -> tuple[list[str], str | None]:
    """The traces at ``path`` (itself if a file, else every Kineto trace below it, sorted) and the directory
    they were searched under (None for a file); fsspec URLs work."""
    fs, local = url_to_fs(str(path))
    if not fs.exists(local):
        raise TraceFormatError(str(path), "no such file or directory")
    if not fs.isdir(local):
        return [str(path)], None
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    prefix = "" if protocol in ("file", "local") else f"{protocol}://"
    found = sorted(p for p in fs.find(local) if p.endswith(TRACE_SUFFIXES[:2]))
    if not found:
        found = sorted(p for p in fs.find(local) if p.endswith(TRACE_SUFFIXES[2:]))
    if not found:
        raise TraceFormatError(str(path), "directory holds no Kineto trace (*.pt.trace.json[.gz])")
    root = prefix + local.rstrip("/") if prefix and not local.startswith(prefix) else local.rstrip("/")
    return [prefix + p if prefix and not p.startswith(prefix) else p for p in found], root


def analyze_file(path: str, root: str | None = None) -> Result:
    """The result of one trace file, with its identity (run, window, rank, host)."""
    from lightning_streamprof.analysis import analyze_table

    table = read_trace(path)
    return analyze_table(table, trace_identity(path, table.metadata, root))


def analyze_runs(path: str | os.PathLike, progress: Progress | None = None) -> list[RunResults]:
    """Every run under ``path``: its windows, each window's ranks, and the run's traces merged.

    ``progress(done, total, trace)`` is called before each trace is read (``done`` read so far) and once at the end.
    """
    from lightning_streamprof.analysis import combine

    paths, root = find_traces(str(path))
    results = []
    for i, p in enumerate(paths):
        if progress is not None:
            progress(i, len(paths), p)
        results.append(analyze_file(p, root))
    if progress is not None:
        progress(len(paths), len(paths), "")
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
    return [msgspec.structs.replace(r, merged=msgspec.structs.replace(r.merged, runs=names)) for r in runs]


def select_run(runs: list[RunResults], run: str | None, path: str) -> Result:
    """The merged result of ``run`` (or of the only run); :class:`SeveralRunsError` when a choice is needed."""
    names = [r.run or "" for r in runs]
    if run is None:
        if len(runs) > 1:
            raise SeveralRunsError(str(path), names)
        return runs[0].merged
    for r in runs:
        if r.run == run:
            return r.merged
    raise TraceFormatError(str(path), f"no run named {run!r} (runs: {', '.join(names)})")


def analyze(path: str | os.PathLike, run: str | None = None) -> Result:
    """Analyse a trace file, or every trace of one run in a directory (local path or fsspec URL).

    A directory's traces are grouped by run (the profiler's ``<stage>-<time>`` directory, else the directory
    that holds them); the result merges the traces of ``run``, or of the only run (a directory with several
    runs raises :class:`SeveralRunsError` without ``run``; :func:`analyze_runs` gives every run).
    Raises :class:`TraceFormatError` naming the file for anything that is not a readable Kineto trace.
    """
    return select_run(analyze_runs(path), run, str(path))
