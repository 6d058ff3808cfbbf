"""The profiler suffixes of ``pipeline_runs.py``'s configurations (``auto+streamprof``, ``on+streamprof-idle``, ...):
what each runs, and the pipeline configuration without it, which the profiled one is paired with per round."""

from __future__ import annotations

from _aftermath import late_start

WITH_PROFILER = "+streamprof"  # the default StreamProfiler, as ``profiler="streamprof"`` gives it
IDLE_PROFILER = "+streamprof-idle"  # the same profiler with no window (its hooks, threads and worker only)
LATE_PROFILER = "+streamprof-late"  # a single window of the default options, at the middle of the run
SWAP_PROFILER = "+streamprof-swap"  # the profiler with no window, swapped with Lightning's own every few steps
NO_WINDOW = 10**9  # a first window beyond any run


def base_config(config: str) -> str:
    """The pipeline configuration of ``config``, without its profiler suffix (``on+graph`` stays itself)."""
    for suffix in (IDLE_PROFILER, LATE_PROFILER, SWAP_PROFILER, WITH_PROFILER):
        config = config.removesuffix(suffix)
    return config


def profiler_options(config: str, steps: int) -> dict | None:
    """``StreamProfiler``'s arguments for ``config`` in a run of ``steps`` steps; None without a profiler suffix."""
    suffix = config[len(base_config(config)):]
    return {WITH_PROFILER: {}, IDLE_PROFILER: {"skip_first": NO_WINDOW}, SWAP_PROFILER: {"skip_first": NO_WINDOW},
            LATE_PROFILER: {"skip_first": late_start(steps), "every": 0}}.get(suffix)
