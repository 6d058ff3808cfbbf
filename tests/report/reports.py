"""Results for the report tests: the real GPU fixture traces, and hand-made distributed results."""

from __future__ import annotations

import os

import msgspec

from lightning_streamprof.api import analyze_runs
from lightning_streamprof.results import RunResults

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "traces")
MEMORY_STACK = os.path.join(FIXTURES, "frozen_backbone_memory_stack.pt.trace.json.gz")

#: the shape the distributed view reads: per-rank rows, stragglers and collectives (the aggregator fills it)
DISTRIBUTED = {
    "ranks": [
        {"rank": 0, "step_ms": 10.0, "computation_ms": 6.0, "overlap_ms": 1.0, "communication_ms": 2.0,
         "other_ms": 1.0, "sync_ms": 0.5, "transfer_ms": 1.5, "relative_score": 1.0, "straggler": False},
        {"rank": 1, "step_ms": 14.0, "computation_ms": 9.0, "overlap_ms": 1.0, "communication_ms": 2.5,
         "other_ms": 1.5, "sync_ms": 0.2, "transfer_ms": 1.5, "relative_score": 0.71, "straggler": True},
    ],
    "stragglers": [1],
    "comm_ops": [{"rank": 0, "name": "nccl:all_reduce <fused>", "calls": 12, "total_bytes": 48 * 2**20,
                  "total_ns": 3_700_000, "transfer_ns": 3_000_000}],
    "waited_for": [{"rank": 1, "collectives": 12, "wait_ns": 2_400_000}],
    "message": "rank 1 is a straggler: its steps take 40% longer",
}


def fixture_run(path: str = MEMORY_STACK, distributed=None) -> RunResults:
    """The run of a fixture trace, with ``distributed`` set on its merged result."""
    (run,) = analyze_runs(path)
    if distributed is not None:
        run = msgspec.structs.replace(run, merged=msgspec.structs.replace(run.merged, distributed=distributed))
    return run
