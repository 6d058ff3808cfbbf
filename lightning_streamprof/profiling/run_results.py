"""This process's analysed windows as the run's results, with the other ranks' traces of the same windows where
they can be read beside this rank's (a shared directory or store)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import msgspec

from lightning_streamprof.profiling.exporter import WindowResult
from lightning_streamprof.results import PipelineRun, RunResults, WindowResults


def run_results(windows: Sequence[WindowResult], run: str | None,
                pipeline: PipelineRun | None = None) -> RunResults | None:
    """This process's analysed windows as a run (windows in order, merged with the rules applied, given what the
    run's StreamPipeline does: ``pipeline``, its own state); None without an analysed window."""
    from lightning_streamprof.analysis import combine

    done = sorted((w for w in windows if w.analysis is not None), key=lambda w: w.window)
    if not done:
        return None
    results = [w.analysis for w in done if w.analysis is not None]
    merged = msgspec.structs.replace(combine(results, run, pipeline), runs=[run] if run else [])
    return RunResults(run=run, merged=merged, pipeline=pipeline, windows=[
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
    merged = msgspec.structs.replace(combine(every, run.run, run.pipeline), runs=[run.run] if run.run else [])
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
