"""Every number of the distributed aggregation on hand-built two-rank traces, against a hand computation.

Per step (µs): rank 0 waits 32 + 2 (step 10) and 20 (step 11) in collectives whose transfer times are the
shortest durations over the ranks (8, 8, 10); rank 1 waits nowhere. Own time = step - sync: rank 0 66 and 80,
rank 1 100 and 100; medians 73 and 100, so rank 1's relative score is 0.73 < 0.75.
"""

import json
import subprocess
import sys

import pytest
from multirank import rank_trace, write_run

from lightning_streamprof.analysis import analyze_table
from lightning_streamprof.api import analyze
from lightning_streamprof.analysis.scoring import score
from lightning_streamprof.results import RankWindow
from lightning_streamprof.trace.identity import trace_identity


def _alone(rank):
    table = rank_trace(rank).table()
    return analyze_table(table, trace_identity(table.source, table.metadata))

MS = 1e-3  # one µs in ms


@pytest.fixture(scope="module", params=[True, False], ids=["args-on-kernel", "args-on-record_param_comms"])
def result(request, tmp_path_factory):
    return analyze(write_run(tmp_path_factory.mktemp("run"), on_kernel=request.param))


def test_per_rank_numbers(result):
    d = result.distributed
    assert d is not None and d.world_size == 2 and d.threshold == 0.75
    r0, r1 = d.ranks
    expect = {
        0: dict(step_ms=100, computation_ms=30, overlap_ms=5, communication_ms=35, other_ms=30, sync_ms=27,
                transfer_ms=13, compute_ms=35, own_ms=73, median_own_ms=73, dataloader_ms=0),
        1: dict(step_ms=100, computation_ms=55, overlap_ms=0, communication_ms=13, other_ms=32, sync_ms=0,
                transfer_ms=13, compute_ms=55, own_ms=100, median_own_ms=100, dataloader_ms=0),
    }
    for stats in (r0, r1):
        assert stats.host == "node-a" and stats.steps == 2 and stats.window is None
        for key, value in expect[stats.rank].items():
            assert getattr(stats, key) == pytest.approx(value * MS, abs=1e-9), (stats.rank, key)
        parts = stats.computation_ms + stats.overlap_ms + stats.communication_ms + stats.other_ms
        assert parts == pytest.approx(stats.step_ms)
    assert r0.relative_score == 1.0 and not r0.straggler
    assert r1.relative_score == pytest.approx(73 / 100) and r1.straggler
    assert d.stragglers == [1]
    assert r0.host_ms == pytest.approx((73 - 35 - 13) * MS) and r1.host_ms == pytest.approx((100 - 55 - 13) * MS)


def test_message_names_the_straggler_lag_and_where(result):
    msg = result.distributed.message
    assert msg.startswith("Rank 1 (host node-a) is a straggler: relative score 0.73 (< 0.75)")
    assert "0.10 ms (median), 0.03 ms (+37%) more than the fastest rank 0's 0.07 ms" in msg
    assert "compute 0.02 ms" in msg  # 55 - 35 µs
    assert "waited for it at 3 of 3 matched collective calls" in msg


def test_late_starts_and_comm_ops(result):
    d = result.distributed
    late = sorted((ls.group, ls.seq, ls.name, ls.step, ls.late_rank, ls.max_wait_ns, ls.ranks) for ls in d.late_starts)
    assert late == [("0", 1, "allreduce", 10, 1, 32_000, 2), ("0", 2, "allreduce", 11, 1, 20_000, 2),
                    ("1", 1, "allgather", 10, 1, 2_000, 2)]
    assert [(w.rank, w.collectives, w.wait_ns) for w in d.waited_for] == [(1, 3, 54_000)]
    ops = {(o.rank, o.name): o for o in d.comm_ops}
    ar0, ag0, ar1, ag1 = ops[0, "allreduce"], ops[0, "allgather"], ops[1, "allreduce"], ops[1, "allgather"]
    assert (ar0.calls, ar0.total_bytes, ar0.mean_bytes) == (2, 8000, 4000)  # 1000 Float
    assert (ag0.calls, ag0.total_bytes) == (1, 1000)  # the larger message: 500 BFloat16
    assert (ar0.total_ns, ar0.mean_ns, ar0.transfer_ns, ar0.mean_transfer_ns) == (70_000, 35_000, 18_000, 9_000)
    assert (ag0.total_ns, ag0.transfer_ns) == (10_000, 8_000)
    assert (ar1.total_ns, ar1.transfer_ns, ag1.total_ns, ag1.transfer_ns) == (18_000, 18_000, 8_000, 8_000)


def test_windows_and_one_trace_alone():
    rows = []
    for rank in (0, 1):
        r = _alone(rank)
        assert r.distributed is not None and len(r.distributed.summaries) == 1  # a trace alone: no one to wait for
        assert r.distributed.ranks[0].sync_ms == 0 and not r.distributed.stragglers
        rows.append(r.distributed.summaries[0])
    d = score(rows)
    assert [w.window for w in d.windows] == [0] and d.windows[0].missing_ranks == []
    assert [s.rank for s in d.windows[0].ranks] == [0, 1] and d.windows[0].stragglers == [1]
    # order of the rows and of the calls in them does not matter
    flipped = [RankWindow(**{**{f: getattr(rows[1], f) for f in RankWindow.__struct_fields__}}), rows[0]]
    assert score(flipped).ranks == d.ranks
    # a missing rank is named; the ranks present are still scored
    alone = score(rows[:1], world_size=2)
    assert alone.missing_ranks == [1] and alone.ranks[0].relative_score == 1.0


def test_individual_score_follows_each_rank_over_windows():
    r0 = _alone(0).distributed.summaries[0]
    first = RankWindow(**{**{f: getattr(r0, f) for f in RankWindow.__struct_fields__}, "window": 0})
    twice_as_slow = RankWindow(**{**{f: getattr(r0, f) for f in RankWindow.__struct_fields__}, "window": 1,
                                  "step_end_ns": [e + (e - s) for s, e in zip(r0.step_start_ns, r0.step_end_ns)]})
    d = score([first, twice_as_slow])
    # alone, rank 0 waits for no one: own time = step time, 100 µs then 200 µs
    assert [w.ranks[0].individual_score for w in d.windows] == [None, 0.5]
    assert d.ranks[0].individual_score == 0.5


def test_cli_json_distributed_contract(tmp_path):
    run = write_run(tmp_path)
    out = subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", "analyze", run, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)["distributed"]
    assert {"ranks", "stragglers", "comm_ops", "late_starts", "message", "windows", "threshold"} <= set(d)
    for r in d["ranks"]:
        assert {"rank", "step_ms", "computation_ms", "overlap_ms", "communication_ms", "other_ms", "sync_ms",
                "transfer_ms", "relative_score", "straggler"} <= set(r)
    assert d["stragglers"] == [1]
    text = subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", "analyze", run], capture_output=True,
                          text=True, timeout=300).stdout
    assert "Rank 1 (host node-a) is a straggler" in text and "Communication ops" in text


def _gloo_rank(rank):
    """A CPU (gloo) step [0, 100): gloo's work ranges on its own threads, without sequence numbers, in another
    order on each rank; they match by name and occurrence in the step."""
    from tracebuilder import TraceBuilder

    b = TraceBuilder(rank=rank, world_size=2)
    b.step(10, 0, 100)
    b.op("aten::mm", 5, 10 if rank == 0 else 40)
    dims = {"Input Dims": [[10]], "Input type": ["float"]}
    ranges = {0: [("gloo:all_reduce", 20, 40, 50), ("gloo:broadcast", 65, 5, 51)],
              1: [("gloo:broadcast", 40, 4, 51), ("gloo:all_reduce", 50, 10, 50)]}[rank]
    for name, ts, dur, tid in ranges:
        b.op(name, ts, dur, tid=tid, cat="user_annotation", **dims)
    table = b.table()
    return analyze_table(table, trace_identity(table.source, table.metadata)).distributed.summaries[0]


def test_gloo_ranges_match_by_name_and_occurrence():
    d = score([_gloo_rank(0), _gloo_rank(1)])
    r0, r1 = d.ranks
    assert (r0.sync_ms, r0.transfer_ms, r0.compute_ms, r0.communication_ms) == pytest.approx((31 * MS, 14 * MS, 10 * MS,
                                                                                              45 * MS))
    assert (r1.sync_ms, r1.transfer_ms, r1.compute_ms, r1.overlap_ms) == pytest.approx((0, 14 * MS, 40 * MS, 4 * MS))
    assert r1.relative_score == pytest.approx(69 / 100) and d.stragglers == [1]
    late = sorted((ls.name, ls.seq, ls.late_rank, ls.max_wait_ns) for ls in d.late_starts)
    assert late == [("all_reduce", None, 1, 30_000), ("broadcast", None, 1, 1_000)]
    assert {(o.rank, o.name): (o.calls, o.total_bytes) for o in d.comm_ops} == {
        (0, "all_reduce"): (1, 40), (0, "broadcast"): (1, 40), (1, "all_reduce"): (1, 40), (1, "broadcast"): (1, 40)}


def _fsdp_rank(rank):
    """FSDP-style calls: the kernel's launching operator (``nccl:...``) sits inside the ``record_param_comms`` that
    holds the arguments; one kernel carries no arguments at all (matched by step and occurrence)."""
    from tracebuilder import TraceBuilder

    b = TraceBuilder(rank=rank, world_size=2)
    b.step(3, 0, 100)
    waits = {0: 0, 1: 6}[rank]  # rank 1 waits 6 µs in each call
    for i, (name, nelems) in enumerate((("_allgather_base", 1024), ("reduce_scatter_tensor_coalesced", 2048))):
        args = {"Collective name": name, "Process Group Name": "2", "Seq": 7 + i, "In msg nelems": nelems,
                "Out msg nelems": nelems // 2, "dtype": "BFloat16", "Group size": 2}
        b.op("record_param_comms", 10 + 20 * i, 5, **args)
        ext = b.op(f"nccl:{name}", 11 + 20 * i, 3)
        b.launch(f"ncclDevKernel_{'AllGather' if i == 0 else 'ReduceScatter_Sum_bf16'}_RING_LL", 12 + 20 * i,
                 50 + 20 * i, 4 + waits, ext, stream=30)
    ext = b.op("nccl:reduce_scatter", 60, 2)
    b.launch("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", 61, 90, 3 + waits, ext, stream=30)
    table = b.table()
    return analyze_table(table, trace_identity(table.source, table.metadata)).distributed.summaries[0]


def test_fsdp_names_nested_arguments_and_kernels_without_them():
    d = score([_fsdp_rank(0), _fsdp_rank(1)])
    ops = {(o.rank, o.name): o for o in d.comm_ops}
    assert set(ops) == {(r, n) for r in (0, 1) for n in ("_allgather_base", "reduce_scatter_tensor_coalesced",
                                                         "ReduceScatter")}
    assert ops[0, "_allgather_base"].total_bytes == 2048 and ops[0, "reduce_scatter_tensor_coalesced"].total_bytes == 4096
    assert ops[0, "ReduceScatter"].total_bytes is None  # no arguments: size unknown
    late = sorted((ls.name, ls.seq, ls.late_rank, ls.max_wait_ns) for ls in d.late_starts)
    assert late == [("ReduceScatter", None, 0, 6_000), ("_allgather_base", 7, 0, 6_000),
                    ("reduce_scatter_tensor_coalesced", 8, 0, 6_000)]
    assert d.ranks[1].sync_ms == pytest.approx(18 * MS) and d.ranks[0].sync_ms == 0


def test_sequence_number_from_the_operator_when_the_kernel_lacks_it():
    from tracebuilder import TraceBuilder

    b = TraceBuilder(rank=0, world_size=2)
    b.step(1, 0, 100)
    ext = b.op("record_param_comms", 10, 5, **{"Collective name": "allreduce", "Seq": 42, "Process Group Name": "0"})
    b.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 11, 20, 5, ext, **{"Collective name": "allreduce",
                                                                          "In msg nelems": 8, "dtype": "Float"})
    table = b.table()
    calls = analyze_table(table, trace_identity(table.source, table.metadata)).distributed.summaries[0].collectives
    assert (calls.seq, calls.bytes, calls.groups, calls.names) == ([42], [32], ["0"], ["allreduce"])
