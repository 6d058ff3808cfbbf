"""Scoring time of a large job: synthetic per-rank windows of N ranks (one slow), encoded as each rank sends them,
decoded and concatenated on "rank 0" into one table and scored, as the live profiler does (without the store:
``distributed_gather.py`` measures the gather itself).

    python -m benchmarks distributed-scoring --ranks 1024 --steps 3 --calls 20 --repeat 5

Prints and saves (``--out``, default ``benchmarks/results/distributed-scoring/``) the per-rank payload size and the time of each part.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lightning_streamprof.results import CollectiveCalls, RankWindow  # noqa: E402
from _record import code_version, command, results_dir  # noqa: E402

STEP_NS = 150_000_000  # 150 ms steps


def synthetic_windows(ranks: int, slow: int, steps: int = 3, calls: int = 20, lag_ns: int = 40_000_000,
                      seed: int = 0) -> list[RankWindow]:
    """One window of ``ranks`` ranks: per step 60 ms of computation, then ``calls`` all-reduces (DDP buckets) of
    25 MB on one stream; rank ``slow`` computes ``lag_ns`` longer and the others wait that long in the first one."""
    rng = np.random.default_rng(seed)
    rows = []
    for rank in range(ranks):
        starts = np.arange(steps, dtype=np.int64) * STEP_NS + 1_000_000_000
        compute = 60_000_000 + (lag_ns if rank == slow else 0) + rng.integers(0, 500_000, size=steps)
        dur = np.full((steps, calls), 1_500_000, np.int64) + rng.integers(0, 100_000, size=(steps, calls))
        if rank != slow:
            dur[:, 0] += lag_ns  # the first bucket waits for the slow rank
        # calls of one stream run one after the other, after the step's computation
        call_start = (starts[:, None] + 60_000_000 + np.cumsum(dur, axis=1) - dur).reshape(-1)
        if rank == slow:
            call_start = call_start + lag_ns
        comp = compute
        rows.append(RankWindow(
            rank=rank, world_size=ranks, host=f"node-{rank // 8:04d}", window=0, first_step=100,
            step_numbers=list(range(100, 100 + steps)), step_start_ns=starts.tolist(),
            step_end_ns=(starts + STEP_NS).tolist(), comp_ns=comp.tolist(), comm_ns=dur.sum(axis=1).tolist(),
            overlap_ns=[5_000_000] * steps, dataloader_ns=[1_000_000] * steps,
            collectives=CollectiveCalls(
                names=["allreduce"], groups=["0"], name=[0] * (steps * calls), group=[0] * (steps * calls),
                seq=list(range(1, steps * calls + 1)), step=np.repeat(np.arange(steps), calls).tolist(),
                occurrence=np.tile(np.arange(calls), steps).tolist(), start_ns=call_start.tolist(),
                dur_ns=dur.reshape(-1).tolist(), bytes=[25 * 2**20] * (steps * calls)),
        ))
    return rows


def run(ranks: int, steps: int, calls: int, repeat: int) -> dict:
    from lightning_streamprof.analysis.rank_table import concat
    from lightning_streamprof.analysis.scoring import score, score_table
    from lightning_streamprof.distributed import wire
    from lightning_streamprof.distributed.live import payload

    rows = synthetic_windows(ranks, slow=ranks // 2 + 1, steps=steps, calls=calls)
    t0 = time.perf_counter()
    payloads = [payload(r) for r in rows]
    encode_s = (time.perf_counter() - t0) / ranks
    merge_s, score_s, table_s = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        table = concat([wire.decode(data, widen=False) for data in payloads])
        t1 = time.perf_counter()
        stats = score_table(table)
        t2 = time.perf_counter()
        score(rows)
        t3 = time.perf_counter()
        merge_s.append(t1 - t0)
        table_s.append(t2 - t1)
        score_s.append(t3 - t2)
    assert stats.stragglers == [ranks // 2 + 1], stats.stragglers
    return {
        "ranks": ranks, "steps": steps, "calls_per_step": calls, "stragglers": stats.stragglers,
        "payload_bytes_max": max(map(len, payloads)), "payload_bytes_mean": statistics.mean(map(len, payloads)),
        "encode_ms_per_rank": 1e3 * encode_s, "merge_s_median": statistics.median(merge_s),
        "table_compute_s_median": statistics.median(table_s), "score_s_median": statistics.median(score_s),
        "rank0_total_s_median": statistics.median(m + t for m, t in zip(merge_s, table_s)),
        "rank0_total_s_min": min(m + t for m, t in zip(merge_s, table_s)), "score_s_min": min(score_s),
        "message": stats.message,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tag", default="cpu")
    parser.add_argument("--out", default=str(results_dir(__file__)))
    args = parser.parse_args()

    result = run(args.ranks, args.steps, args.calls, args.repeat)
    date = time.strftime("%Y%m%d")
    meta = {"machine": f"{platform.machine()} {os.cpu_count()} CPU cores, {platform.platform()}", "date": date,
            "command": command(__file__), "code": code_version()}
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"distributed_scoring-{args.tag}-{date}")
    with open(base + ".json", "w") as f:
        json.dump({**meta, **result}, f, indent=2)
    lines = [f"# distributed_scoring — {meta['machine']}, {date}", "", f"`{meta['command']}`", "",
             "| ranks | calls/rank | payload max (bytes) | encode ms/rank | rank 0: decode + concat s | rank 0: score "
             "s | rank 0 total s (median / best) | score() of the rows s (median / best) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |",
             f"| {result['ranks']} | {args.steps * args.calls} | {result['payload_bytes_max']} | "
             f"{result['encode_ms_per_rank']:.2f} | {result['merge_s_median']:.3f} | "
             f"{result['table_compute_s_median']:.3f} | {result['rank0_total_s_median']:.3f} / "
             f"{result['rank0_total_s_min']:.3f} | {result['score_s_median']:.3f} / {result['score_s_min']:.3f} |", "",
             "Medians of the repeats; the machine is shared (other jobs ran alongside): the best repeat is the "
             "cost on an idle machine.", "",
             f"Straggler found: rank {result['stragglers']}. {result['message']}", ""]
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
