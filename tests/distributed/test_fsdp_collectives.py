"""FSDP's collectives on hand-built traces: every spelling of an all-gather and a reduce-scatter matched across
ranks by group, name and sequence number, their time hidden behind computation vs exposed (hand-computed), gloo's
reduce-scatter (run as an all-reduce) named for what was issued, and the kinds of all spellings."""

import pytest
from tracebuilder import TraceBuilder

from lightning_streamprof.analysis import analyze_table
from lightning_streamprof.analysis.collective_kinds import issued_kinds, kind
from lightning_streamprof.analysis.scoring import score
from lightning_streamprof.trace.identity import trace_identity

MS = 1e-3  # one µs in ms

# (seq, group, Collective name, kernel, [(start, end) events on rank 0], [(start, end) events on rank 1])
NCCL_CALLS = [
    (1, "0", "all_gather_into_tensor", "ncclDevKernel_AllGather_RING_LL", [(20, 40)], [(30, 40)]),
    (2, "0", "_allgather_base", "ncclDevKernel_AllGather_RING_LL", [(40, 50)], [(40, 48)]),
    (3, "0", "allgather_into_tensor_coalesced", "ncclDevKernel_AllGather_RING_LL", [(50, 55), (55, 60)],
     [(52, 56), (56, 60)]),
    (1, "1", "reduce_scatter_tensor", "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", [(110, 140)], [(120, 140)]),
    (2, "1", "_reduce_scatter_base", "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", [(140, 150)], [(141, 150)]),
    (3, "1", "reduce_scatter_tensor_coalesced", "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", [(150, 170)],
     [(160, 170)]),
]
COMPUTE = [(0, 30), (100, 130)]  # both ranks


def _summary(b):
    table = b.table()
    return analyze_table(table, trace_identity(table.source, table.metadata)).distributed.summaries[0]


def _nccl_rank(rank):
    """One step [0, 200): compute kernels on stream 7, all-gathers on group "0" and reduce-scatters on group "1"
    (their own streams, as FSDP runs them), rank 1 arriving late at each; the coalesced calls are two kernels."""
    b = TraceBuilder(rank=rank, world_size=2)
    b.step(7, 0, 200)
    for lo, hi in COMPUTE:
        ext = b.op("aten::mm", lo, 1)
        b.launch("sm90_gemm", lo, lo, hi - lo, ext)
    for seq, group, name, kernel, r0, r1 in NCCL_CALLS:
        args = {"Collective name": name, "Process Group Name": group, "Seq": seq, "In msg nelems": 512,
                "Out msg nelems": 1024, "dtype": "BFloat16", "Group size": 2}
        events = (r0, r1)[rank]
        ext = b.op("record_param_comms", events[0][0] - 2, 1, **args)
        for lo, hi in events:
            b.launch(kernel, events[0][0] - 2, lo, hi - lo, ext, stream=20 + int(group), **args)
    return _summary(b)


def test_every_fsdp_spelling_matched_by_group_name_and_sequence_number():
    d = score([_nccl_rank(0), _nccl_rank(1)])
    late = sorted((ls.group, ls.seq, ls.name, ls.late_rank, ls.max_wait_ns) for ls in d.late_starts)
    assert late == [("0", 1, "all_gather_into_tensor", 1, 10_000), ("0", 2, "_allgather_base", 1, 2_000),
                    ("0", 3, "allgather_into_tensor_coalesced", 1, 2_000),
                    ("1", 1, "reduce_scatter_tensor", 1, 10_000), ("1", 2, "_reduce_scatter_base", 1, 1_000),
                    ("1", 3, "reduce_scatter_tensor_coalesced", 1, 10_000)]
    r0, r1 = d.ranks
    assert r0.sync_ms == pytest.approx(35 * MS) and r1.sync_ms == 0
    assert r1.relative_score == pytest.approx((200 - 35) / 200) and d.stragglers == []  # 0.825: above 0.75
    ops = {(o.rank, o.name): o for o in d.comm_ops}
    coalesced = ops[0, "allgather_into_tensor_coalesced"]
    assert (coalesced.calls, coalesced.total_ns, coalesced.transfer_ns) == (1, 10_000, 8_000)  # two kernels, one call
    assert {o.kind for o in d.comm_ops} == {"all_gather", "reduce_scatter"}


def test_hidden_and_exposed_communication_per_rank_and_kind():
    """Rank 0: all-gathers 20 + 10 + 10 µs, of which [20, 30) under the first compute kernel: hidden 10, exposed
    30; reduce-scatters 30 + 10 + 20, of which [110, 130) hidden: 20 and 40. Rank 1: all-gathers 10 + 8 + 8, none
    hidden; reduce-scatters 20 + 9 + 10, [120, 130) hidden."""
    from lightning_streamprof.report.distributed import collectives_by_kind

    d = score([_nccl_rank(0), _nccl_rank(1)])
    kinds = {(k["rank"], k["kind"]): k for k in collectives_by_kind(d)}
    expect = {(0, "all_gather"): (3, 40_000, 10_000, 26_000), (0, "reduce_scatter"): (3, 60_000, 20_000, 39_000),
              (1, "all_gather"): (3, 26_000, 0, 26_000), (1, "reduce_scatter"): (3, 39_000, 10_000, 39_000)}
    assert {key: (k["calls"], k["total_ns"], k["hidden_ns"], k["transfer_ns"]) for key, k in kinds.items()} == expect
    ops = {(o.rank, o.name): o for o in d.comm_ops}
    first = ops[0, "all_gather_into_tensor"]
    assert (first.hidden_ns, first.exposed_ns) == (10_000, 10_000)
    assert ops[1, "reduce_scatter_tensor"].hidden_ns == 10_000 and ops[1, "reduce_scatter_tensor"].exposed_ns == 10_000


def _gloo_rank(rank):
    """CPU FSDP on gloo: the training thread issues ``c10d::`` operators; gloo's thread runs them as
    ``gloo:all_gather`` and, for the reduce-scatter, ``gloo:all_reduce``; a DDP-style all-reduce follows."""
    b = TraceBuilder(rank=rank, world_size=2)
    b.step(3, 0, 100)
    b.op("aten::addmm", 1, 8)
    late = 4 * rank  # rank 1 issues everything 4 µs later
    dims = {"Input Dims": [[64]], "Input type": ["float"]}
    for name, ts in (("c10d::_allgather_base_", 10), ("c10d::_reduce_scatter_base_", 40), ("c10d::allreduce_", 70)):
        b.op(name, ts + late, 2)
    for name, ts, end in (("gloo:all_gather", 12, 20), ("gloo:all_reduce", 42, 55), ("gloo:all_reduce", 72, 80)):
        b.op(name, ts + late, end - ts - late, tid=50, cat="user_annotation", **dims)
    return _summary(b)


def test_gloo_reduce_scatter_named_for_the_operator_that_issued_it():
    rows = [_gloo_rank(0), _gloo_rank(1)]
    assert rows[0].collectives.names == ["all_gather", "reduce_scatter", "all_reduce"]
    d = score(rows)
    late = sorted((ls.name, ls.late_rank, ls.max_wait_ns) for ls in d.late_starts)
    assert late == [("all_gather", 1, 4_000), ("all_reduce", 1, 4_000), ("reduce_scatter", 1, 4_000)]
    assert {(o.rank, o.kind) for o in d.comm_ops} == {(r, k) for r in (0, 1) for k in
                                                      ("all_gather", "reduce_scatter", "all_reduce")}


def test_issued_kinds_pairs_each_range_with_the_earliest_fitting_operator():
    import numpy as np

    starts = np.array([5, 12, 42, 72])
    got = issued_kinds(starts, ["all_reduce", "all_gather", "all_reduce", "all_reduce"], np.array([10, 40, 70]),
                       ["all_gather", "reduce_scatter", "all_reduce"])
    # the first range's operator ran before the trace began: none fits
    assert got == [None, "all_gather", "reduce_scatter", "all_reduce"]


@pytest.mark.parametrize("name,family", [
    ("all_gather_into_tensor", "all_gather"), ("_allgather_base", "all_gather"), ("allgather", "all_gather"),
    ("allgather_into_tensor_coalesced", "all_gather"), ("c10d::_allgather_base_", "all_gather"),
    ("ncclDevKernel_AllGather_RING_LL", "all_gather"), ("AllGather", "all_gather"), ("gloo:all_gather", "all_gather"),
    ("reduce_scatter_tensor", "reduce_scatter"), ("_reduce_scatter_base", "reduce_scatter"),
    ("reduce_scatter_tensor_coalesced", "reduce_scatter"), ("c10d::reduce_scatter_", "reduce_scatter"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"), ("ReduceScatter", "reduce_scatter"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", "all_reduce"), ("allreduce_coalesced", "all_reduce"),
    ("nccl:all_reduce <fused>", "all_reduce"), ("gloo:all_reduce", "all_reduce"), ("broadcast", "broadcast"),
    ("ncclDevKernel_SendRecv", "send_recv"), ("recv_any_source", "send_recv"), ("alltoall_base", "all_to_all"),
    ("barrier", "barrier"), ("reduce", "reduce"), ("gather", "gather"), ("scatter", "scatter"), ("aten::mm", "other"),
])
def test_kind_of_every_spelling(name, family):
    assert kind(name) == family
