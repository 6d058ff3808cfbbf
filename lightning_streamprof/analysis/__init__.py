"""Pure functions from an :class:`~lightning_streamprof.trace.EventTable` to typed results.

:func:`analyze_table` builds one :class:`~lightning_streamprof.analysis.context.TraceContext` per trace and runs
every analysis on it; :func:`combine` merges the results of several traces exactly and applies the rules to the
merged result. The results and their JSON form are in :mod:`lightning_streamprof.results`.
"""

from __future__ import annotations

from collections.abc import Sequence

from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.distributed import is_distributed, rank_window
from lightning_streamprof.analysis.gpu import gpu_metrics
from lightning_streamprof.analysis.host import host_time, sync_waits
from lightning_streamprof.analysis.hta_analyses import hta_analyses
from lightning_streamprof.analysis.kernels import kernel_stats, tensor_core_use
from lightning_streamprof.analysis.memory import memory_stats
from lightning_streamprof.analysis.operators import operator_stats
from lightning_streamprof.analysis.rules import recommend
from lightning_streamprof.analysis.scoring import score
from lightning_streamprof.analysis.source import source_lines
from lightning_streamprof.analysis.staging import pipeline_work
from lightning_streamprof.analysis.steps import step_breakdown
import msgspec

from lightning_streamprof.results import DistributedStats, PipelineRun, RankWindow, Result, TraceIdentity, merge
from lightning_streamprof.results.invariants import violations
from lightning_streamprof.trace.table import EventTable, TraceFormatError

__all__ = ["TraceContext", "analyze_table", "combine", "with_recommendations"]


def analyze_table(table: EventTable, identity: TraceIdentity | None = None) -> Result:
    """Run every analysis on one trace (``identity`` defaults to the table's source alone).

    The result always satisfies :func:`lightning_streamprof.results.invariants.violations` (step parts sum to the
    step, fractions in 0..1, nothing negative, every number fits JSON); a trace whose numbers cannot make such
    a result raises :class:`~lightning_streamprof.trace.TraceFormatError`.
    """
    identity = identity or TraceIdentity(path=table.source)
    ctx = TraceContext(table)
    steps = step_breakdown(ctx, identity)
    result = Result(
        run=identity.run,
        traces=[identity],
        gpu=gpu_metrics(ctx, identity),
        steps=steps,
        kernels=kernel_stats(ctx),
        operators=operator_stats(ctx),
        memory=memory_stats(ctx, identity),
        tensor_cores=tensor_core_use(ctx),
        source_lines=source_lines(ctx),
        host=host_time(ctx),
        syncs=sync_waits(ctx),
        pipeline=pipeline_work(ctx),
        recommendations=[],
        distributed=distributed_of([rank_window(ctx, identity, steps)], keep=True) if is_distributed(ctx, identity)
        else None,
        warnings=[f"{table.source}: {w}" for w in table.warnings],
        hta=hta_analyses(ctx, identity),
    )
    result = with_recommendations(result)
    problems = violations(result)
    if problems:
        raise TraceFormatError(table.source, f"inconsistent values ({problems[0]})")
    return result


def distributed_of(summaries: Sequence[RankWindow], keep: bool = False) -> DistributedStats | None:
    """The distributed aggregation of per-rank windows (None without any)."""
    return score(summaries, keep_summaries=keep) if summaries else None


def with_recommendations(result: Result, pipeline: PipelineRun | None = None) -> Result:
    """``result`` with the findings of every rule on it; ``pipeline``: what the run's StreamPipeline does, from its
    own state (see :func:`~lightning_streamprof.analysis.rules.recommend`)."""
    return msgspec.structs.replace(result, recommendations=recommend(result, pipeline=pipeline))


def combine(results: Sequence[Result], run: str | None = None, pipeline: PipelineRun | None = None) -> Result:
    """Several traces' results merged exactly (see :func:`lightning_streamprof.results.merge`), with the rules
    applied to the merged result (and ``pipeline``, the run's StreamPipeline's own state, when given)."""
    if len(results) == 1 and results[0].run == run:
        return results[0] if pipeline is None else with_recommendations(results[0], pipeline)
    summaries = [s for r in results if r.distributed is not None for s in r.distributed.summaries]
    merged = msgspec.structs.replace(merge(results, run=run), distributed=distributed_of(summaries))
    return with_recommendations(merged, pipeline)
