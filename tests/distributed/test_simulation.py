"""1,024 synthetic ranks, one slow: found, scored in under a second, and each rank's payload under 64 KB."""

import os
import sys
import time

from lightning_streamprof.distributed.live import PAYLOAD_LIMIT, payload
from lightning_streamprof.analysis.scoring import score

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
from distributed_scoring import synthetic_windows  # noqa: E402


def test_1024_ranks_one_slow():
    rows = synthetic_windows(1024, slow=513, steps=3, calls=20)
    assert max(len(payload(r)) for r in rows[:64]) < PAYLOAD_LIMIT
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        stats = score(rows)
        times.append(time.perf_counter() - t0)
    assert min(times) < 1.0, times
    assert stats.stragglers == [513] and len(stats.ranks) == 1024 and stats.missing_ranks == []
    assert stats.message.startswith("Rank 513 (host node-0064) is a straggler")
    assert {w.late_rank for w in stats.late_starts if w.max_wait_ns > 30e6} == {513}


def test_payload_stays_under_the_limit_when_a_window_holds_many_collectives():
    (row,) = synthetic_windows(1, slow=-1, steps=8, calls=2000)  # 16,000 calls: an FSDP-sized window
    data = payload(row)
    assert len(data) <= PAYLOAD_LIMIT
    from lightning_streamprof.distributed import wire

    (back,) = wire.decode(data).to_windows()
    assert back.trimmed and 0 < len(back.collectives) < 16_000
    assert back.step_numbers == row.step_numbers  # whole steps are kept; only later steps' calls are left out
    assert set(back.collectives.step) == set(range(max(back.collectives.step) + 1))
