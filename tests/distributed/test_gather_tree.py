"""The hierarchical gather on a real TCPStore (one process, ranks simulated in turn or on threads): each host's
leader gathers its ranks, rank 0 its hosts; every wait bounded; a dead rank or host named, waited for once, its
late post carried to the next gather; the live tables equal scoring every rank's row directly."""

import os
import sys
import threading
import time
import types
import warnings

import msgspec
import pytest
import torch.distributed as dist

from lightning_streamprof.analysis.scoring import score
from lightning_streamprof.distributed.exchange import StoreExchange
from lightning_streamprof.distributed.live import LiveAggregator, payload_limit, window_metrics
from lightning_streamprof.distributed.gather import HostLayout, TreeGather
from lightning_streamprof.results import rank_ranges

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
from distributed_scoring import synthetic_windows  # noqa: E402

WORLD, PER_HOST = 16, 4


@pytest.fixture()
def store():
    return dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)


def trees(store, timeout=1.0, host_timeout=0.3, world=WORLD, per_host=PER_HOST):
    layout = HostLayout.of(world, per_host)
    return [TreeGather(StoreExchange(store, r, world, prefix="t", timeout=timeout), layout, timeout, host_timeout)
            for r in range(world)]


def joined(parts):
    return msgspec.msgpack.encode(sorted((r, v) for r, posts in parts.items() for v in posts))


def run_gather(gathers, tag, skip=()):
    """Non-leaders post, then the leaders of hosts 1.. gather, then rank 0 (as the steps would order them)."""
    for g in gathers:
        if not g.is_leader() and g.rank not in skip:
            g.gather(tag, f"{tag}:{g.rank}".encode(), joined)
    for g in gathers[1:]:
        if g.is_leader() and g.rank not in skip:
            g.gather(tag, f"{tag}:{g.rank}".encode(), joined)
    t0 = time.perf_counter()
    out = gathers[0].gather(tag, f"{tag}:0".encode(), joined)
    return out, time.perf_counter() - t0


def values(got):
    return sorted(v.decode() for b in got.blocks for _, v in msgspec.msgpack.decode(b))


def test_layout_groups_consecutive_ranks_and_falls_back_to_one_level():
    layout = HostLayout.of(16, 4)
    assert (layout.hosts, layout.host(9), layout.leader(2), list(layout.members(3))) == (4, 2, 8, [12, 13, 14, 15])
    assert HostLayout.of(6, 4).per_host == 6 and HostLayout.of(6, None).hosts == 1  # flat: rank 0 reads every rank


def test_rank_zero_reads_one_block_per_host(store):
    got, _ = run_gather(trees(store), "g1")
    assert len(got.blocks) == WORLD // PER_HOST and got.missing == [] and got.hosts_missing == []
    assert values(got) == sorted(f"g1:{r}" for r in range(WORLD))
    assert not [k for k in store.list_keys() if k.startswith("t/")]  # every key read is deleted


def test_dead_rank_named_waited_for_once_and_its_late_post_carried(store):
    gathers = trees(store)
    got, _ = run_gather(gathers, "g1", skip={5})
    assert got.missing == [5] and "g1:5" not in values(got)
    gathers[5].gather("g1", b"g1:5", joined)  # rank 5 posts after its leader gave up on it
    t0 = time.perf_counter()
    for g in gathers[1:]:
        if not g.is_leader() and g.rank != 5:
            g.gather("g2", f"g2:{g.rank}".encode(), joined)
    gathers[4].gather("g2", b"g2:4", joined)  # rank 5 missed gather 1: its leader does not wait for it again
    assert time.perf_counter() - t0 < 0.2
    for g in (8, 12):
        gathers[g].gather("g2", f"g2:{g}".encode(), joined)
    got = gathers[0].gather("g2", b"g2:0", joined)
    assert "g1:5" in values(got) and "g2:5" not in values(got)  # its late post goes with gather 2
    assert got.missing == []  # it answered, late: the next gather waits for it again


def test_dead_host_named_and_rank_zero_waits_at_most_its_timeout(store):
    gathers = trees(store, timeout=1.0, host_timeout=0.3)
    got, seconds = run_gather(gathers, "g1", skip=set(range(8, 12)))  # host 2 is down
    assert got.hosts_missing == [2] and got.missing == [8, 9, 10, 11]
    assert 0.9 < seconds < 3
    got, seconds = run_gather(gathers, "g2", skip=set(range(8, 12)))
    assert got.missing == [8, 9, 10, 11] and seconds < 0.5  # a silent host is not waited for again


def test_rank_ranges_and_payload_limits():
    assert rank_ranges([8, 9, 10, 11, 3, 40, 41]) == "3, 8-11, 40-41" and rank_ranges([]) == ""
    assert payload_limit(2) == 64 * 1024 and payload_limit(16_384) == 4096 and payload_limit(10**7) == 2048


def _aggregator(store, rank, world, per_host, logged, timeout=2.0):
    return LiveAggregator(StoreExchange(store, rank, world, prefix="live", timeout=timeout), threshold=0.75,
                          gather_after=None, log_metrics=lambda m, s: logged.append(m), global_step=lambda: 3,
                          per_host=per_host)


def _aggregators(store, world, per_host, logged, timeout=2.0):
    return [_aggregator(store, r, world, per_host, logged, timeout) for r in range(world)]


def _analysis(row):
    return types.SimpleNamespace(distributed=types.SimpleNamespace(summaries=[row]))


def test_live_tables_equal_scoring_every_row_directly(store, tmp_path):
    rows = synthetic_windows(WORLD, slow=9, steps=3, calls=4)
    logged = []
    aggs = _aggregators(store, WORLD, PER_HOST, logged)
    for agg, row in zip(aggs, rows):
        agg.window_ended(0, stop=12, next_start=None, window_dir=str(tmp_path))
        agg.add_local(0, _analysis(row), global_step=11)
    order = [a for a in aggs if not a.tree.is_leader()] + [a for a in aggs[1:] if a.tree.is_leader()] + [aggs[0]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for agg in order:
            agg.finish()
    (stats,) = aggs[0].results
    assert stats == score(rows, world_size=WORLD)  # the same tables as scoring every row at once
    assert stats.stragglers == [9] and stats.missing_ranks == []
    assert any("Rank 9 (host node-0001) is a straggler" in str(w.message) for w in caught)
    assert logged[0] == window_metrics(stats) and (tmp_path / "streamprof" / "distributed.json").exists()


def test_live_dead_rank_is_named_and_the_rest_scored(store, tmp_path):
    rows = synthetic_windows(WORLD, slow=9, steps=3, calls=4)
    aggs = _aggregators(store, WORLD, PER_HOST, [], timeout=1.0)
    for agg, row in zip(aggs, rows):
        agg.window_ended(0, stop=12, next_start=None, window_dir=str(tmp_path))
        agg.add_local(0, _analysis(row), global_step=11)
    alive = [a for a in aggs if a.rank not in (6, 7)]
    order = [a for a in alive if not a.tree.is_leader()] + [a for a in alive[1:] if a.tree.is_leader()] + [aggs[0]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        for agg in order:
            agg.finish()
        assert time.perf_counter() - t0 < 5
    (stats,) = aggs[0].results
    assert stats.missing_ranks == [6, 7] and len(stats.ranks) == WORLD - 2 and stats.stragglers == [9]
    assert any("rank(s) 6-7 sent no summary (no answer within 1 s (rank(s) 6-7))" in str(w.message) for w in caught)


def test_placement_agreed_through_the_hosts(store):
    """Every rank takes the largest deferral any rank asks for; ranks on threads, each with its own client."""
    world, per_host = 8, 2
    answers = {}

    def rank(r):
        client = store if r == 0 else dist.TCPStore("127.0.0.1", store.port, world, False)
        agg = _aggregator(client, r, world, per_host, [], timeout=20)
        answers[r] = agg.agree_defer(0, 10 if r == 5 else r)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert answers == dict.fromkeys(range(world), 10)


def test_rank_zero_keeps_the_latest_windows_only(store, monkeypatch):
    """Each window's results are in its distributed.json; memory holds the latest few (a 16,384-rank window is
    tens of MB)."""
    import lightning_streamprof.distributed.live as live
    from lightning_streamprof.analysis.rank_table import RankTable

    monkeypatch.setattr(live, "KEEP_RANK_ROWS", 40)
    agg = _aggregator(store, 0, WORLD, PER_HOST, [])
    rows = synthetic_windows(WORLD, slow=9, steps=2, calls=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for window in range(5):
            agg._score(window, live._Pending(since=0, tables=[RankTable.from_windows(rows)], senders=set(range(WORLD))))
    assert len(agg.results) == 2 and agg.results[-1].stragglers == [9]  # 2 x 16 rows <= 40 < 3 x 16
