"""HTA's analyses of one trace in one pass over its shared context (:func:`hta_analyses`, run by
:func:`~lightning_streamprof.analysis.analyze_table` beside the others)."""

from __future__ import annotations

from lightning_streamprof.analysis.bandwidth import bandwidth
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.critical_path import critical_path
from lightning_streamprof.analysis.idle import idle_time
from lightning_streamprof.analysis.launches import launch_stats
from lightning_streamprof.analysis.queue import queue_lengths
from lightning_streamprof.analysis.sequences import kernel_sequences
from lightning_streamprof.analysis.user_ranges import annotation_times
from lightning_streamprof.results import TraceIdentity
from lightning_streamprof.results.hta import HtaAnalyses


def hta_analyses(ctx: TraceContext, identity: TraceIdentity | None = None) -> HtaAnalyses:
    """Idle time, launch statistics, GPU time per range, queue length, bandwidth, critical path and kernel sequences
    of the trace (per-stream rows and steps carry ``identity``'s rank and window)."""
    return HtaAnalyses(idle=idle_time(ctx, identity), launches=launch_stats(ctx), annotations=annotation_times(ctx),
                       hooks=annotation_times(ctx, hooks=True),
                       queue=queue_lengths(ctx, identity), bandwidth=bandwidth(ctx),
                       critical_path=critical_path(ctx, identity), sequences=kernel_sequences(ctx))
