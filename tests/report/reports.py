"""Results for the report tests: the real GPU fixture traces, and hand-made distributed results."""

from __future__ import annotations

import os

import msgspec

from lightning_streamprof.api import analyze_runs
from lightning_streamprof.results import CommOpStats, DistributedStats, RankStats, RunResults, WaitedFor

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "traces")
MEMORY_STACK = os.path.join(FIXTURES, "frozen_backbone_memory_stack.pt.trace.json.gz")



def _rank(rank, step_ms, computation_ms, communication_ms, other_ms, sync_ms, relative_score, straggler):
    """One rank's row (overlap 1 ms, transfer 1.5 ms per step)."""
    return RankStats(rank=rank, host=None, window=None, steps=3, step_ms=step_ms, computation_ms=computation_ms,
                     overlap_ms=1.0, communication_ms=communication_ms, other_ms=other_ms, sync_ms=sync_ms,
                     transfer_ms=1.5, dataloader_ms=0.0, compute_ms=computation_ms + 1.0, host_ms=other_ms,
                     own_ms=step_ms - sync_ms, median_own_ms=step_ms - sync_ms, relative_score=relative_score,
                     individual_score=None, straggler=straggler)


#: what the distributed view reads: per-rank rows, stragglers and collectives (the aggregator fills it)
DISTRIBUTED = DistributedStats(
    threshold=0.75, world_size=2,
    ranks=[_rank(0, 10.0, 6.0, 2.0, 1.0, 0.5, 1.0, False), _rank(1, 14.0, 9.0, 2.5, 1.5, 0.2, 0.71, True)],
    stragglers=[1],
    comm_ops=[CommOpStats(rank=0, name="nccl:all_reduce <fused>", calls=12, total_bytes=48 * 2**20,
                          mean_bytes=4 * 2**20, total_ns=3_700_000, mean_ns=308_333.3, transfer_ns=3_000_000,
                          mean_transfer_ns=250_000.0)],
    late_starts=[], waited_for=[WaitedFor(rank=1, collectives=12, wait_ns=2_400_000)], windows=[],
    message="rank 1 is a straggler: its steps take 40% longer",
)


def fixture_run(path: str = MEMORY_STACK, distributed=None) -> RunResults:
    """The run of a fixture trace, with ``distributed`` set on its merged result."""
    (run,) = analyze_runs(path)
    if distributed is not None:
        run = msgspec.structs.replace(run, merged=msgspec.structs.replace(run.merged, distributed=distributed))
    return run
