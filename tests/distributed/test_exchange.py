"""The gather through the store: bounded waits, a silent rank reported missing, late windows delivered later,
the payload encoding and its reduction; one process, a real TCPStore."""

import time
import warnings

import pytest
import torch.distributed as dist
from multirank import rank_trace

from lightning_streamprof.analysis import analyze_table
from lightning_streamprof.distributed.exchange import StoreExchange
from lightning_streamprof.distributed.live import LiveAggregator, payload, window_metrics
from lightning_streamprof.analysis.rank_table import concat
from lightning_streamprof.analysis.scoring import THRESHOLD, score, score_table
from lightning_streamprof.distributed import wire
from lightning_streamprof.trace.identity import trace_identity


@pytest.fixture()
def store():
    return dist.TCPStore("127.0.0.1", 0, 2, True, wait_for_workers=False)


def summary(rank):
    table = rank_trace(rank).table()
    return analyze_table(table, trace_identity(table.source, table.metadata))


def aggregator(store, rank, logged, timeout=0.5):
    return LiveAggregator(StoreExchange(store, rank, 2, prefix="streamprof/test", timeout=timeout), threshold=0.75,
                          gather_after=None, log_metrics=lambda m, s: logged.append((m, s)), global_step=lambda: 7)


def test_collect_waits_at_most_the_timeout(store):
    ex = StoreExchange(store, 0, 3, prefix="p", timeout=0.3)
    StoreExchange(store, 2, 3, prefix="p", timeout=0.3).post("t", b"two")
    t0 = time.perf_counter()
    got = ex.collect("t", ranks=[1, 2])
    assert time.perf_counter() - t0 < 5
    assert got == {2: b"two"}
    assert ex.collect("t", ranks=[2], timeout=0.1) == {}  # read keys are deleted
    assert ex.wait_one("t", "decision", timeout=0.1) is None


def test_silent_rank_is_reported_missing_and_never_hangs(store, tmp_path):
    logged = []
    agg = aggregator(store, 0, logged)
    agg.window_ended(0, stop=12, next_start=None, window_dir=str(tmp_path))
    agg.add_local(0, summary(0), global_step=11)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agg.finish()
    assert time.perf_counter() - t0 < 10
    assert any("rank(s) 1 sent no summary" in str(w.message) for w in caught)
    (stats,) = agg.results
    assert stats.missing_ranks == [1] and [r.rank for r in stats.ranks] == [0]
    assert logged and logged[0][1] == 11 and logged[0][0]["streamprof/missing_ranks"] == 1
    assert (tmp_path / "streamprof" / "distributed.json").exists()


def test_two_ranks_gather_late_windows_and_agree_on_placement(store, tmp_path):
    logged = []
    zero, one = aggregator(store, 0, logged), aggregator(store, 1, [])
    for agg in (zero, one):
        agg.window_ended(0, stop=12, next_start=20, window_dir=str(tmp_path))
    zero.add_local(0, summary(0), global_step=11)
    one.at_step(20)  # rank 1's analysis is not ready at the gather step: it posts nothing for window 0
    zero.at_step(20)
    assert zero.results == []  # rank 0 waits for the late window (two more gathers at most)
    one.add_local(0, summary(1), global_step=11)
    one.finish()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zero.finish()
    (stats,) = zero.results
    assert stats.stragglers == [1] and stats.missing_ranks == []
    assert any("Rank 1 (host node-a) is a straggler" in str(w.message) for w in caught)
    metrics = logged[0][0]
    assert metrics["streamprof/stragglers"] == 1 and metrics["streamprof/straggler_score"] == pytest.approx(0.73)
    assert set(window_metrics(stats)) >= {"streamprof/rank0/step_ms", "streamprof/rank1/sync_ms"}
    # placement: every rank takes the largest deferral asked for (rank 1 posts first, then waits for rank 0);
    # waits long enough for a loaded machine to run the other thread (they end as soon as the answer is there)
    import threading

    # each rank its own client of the store, as in a real run (one TCPStore client is not shared by two threads)
    client = dist.TCPStore("127.0.0.1", store.port, 2, False)
    zero, one = aggregator(store, 0, [], timeout=20), aggregator(client, 1, [], timeout=20)
    answer = {}
    t = threading.Thread(target=lambda: answer.setdefault(1, one.agree_defer(0, 9)))
    t.start()
    answer[0] = zero.agree_defer(0, 4)
    t.join(30)
    assert answer == {0: 9, 1: 9}


def test_the_live_gather_s_bytes_carry_each_rank_s_row_and_concatenate_to_the_scored_table():
    rows = [summary(r).distributed.summaries[0] for r in (0, 1)]
    tables = [wire.decode(payload(row)) for row in rows]
    assert [t.to_windows()[0] for t in tables] == rows
    assert score_table(concat(tables), THRESHOLD) == score(rows)
