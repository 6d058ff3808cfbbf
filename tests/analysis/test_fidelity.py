"""torch-tb-profiler's definitions on small hand-built traces, where an earlier reading of ours differed."""

import pytest
from handbuilt import US
from tracebuilder import TraceBuilder

from lightning_streamprof.analysis.gpu import gpu_metrics
from lightning_streamprof.analysis.kernels import tensor_core_use
from lightning_streamprof.analysis.memory import memory_stats
from lightning_streamprof.analysis.operators import operator_stats


def test_steps_data_loading_and_optimizer_ranges_are_not_operators():
    """Older traces record ``ProfilerStep#N``, the DataLoader's ``__next__``, DataPipe and ``Optimizer.step`` ranges
    as CPU operators; torch-tb-profiler does not list them, and neither do we. The step [0,100) still nests conv
    [10,40): conv's host self time is its own 30 µs."""
    b = TraceBuilder()
    b.op("ProfilerStep#7", 0, 100)
    b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1, 5)
    b.op("enumerate(DataPipe)#ShufflerIterDataPipe", 6, 3)
    b.op("aten::conv2d", 10, 30)
    b.op("Optimizer.step#SGD.step", 50, 20)
    b.op("aten::add_", 55, 10)
    stats = {s.name: s for s in operator_stats(b.context())}
    assert set(stats) == {"aten::conv2d", "aten::add_"}
    assert stats["aten::conv2d"].host_self_ns == 30 * US and stats["aten::add_"].host_self_ns == 10 * US


def test_lower_case_external_id_links_device_work_in_older_traces():
    """torch 1.8 traces spell ``external id`` in lower case: mm's kernel (20 µs) is still its device time, and it is
    a Tensor-Core-eligible operator's kernel."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    mm = b.op("aten::mm", 10, 20)
    b.launch("gemm_kernel", 12, 40, 20, mm, cat="Kernel", rt_cat="Runtime")
    for ev in b.events:
        if "External id" in ev["args"] and ev["cat"] != "user_annotation":
            ev["args"]["external id"] = ev["args"].pop("External id")
    ctx = b.context()
    (mm_stats,) = operator_stats(ctx)
    assert mm_stats.device_self_ns == 20 * US and mm_stats.host_self_ns == (20 - 1) * US
    assert tensor_core_use(ctx).eligible_kernel_ns == 20 * US


def test_memory_events_without_cat_or_totals_are_read():
    """Older ``[memory]`` events carry no ``cat``, and some no ``Total Allocated``: they still belong to their
    operator (empty +256 then -64 B), and the device's allocated curve is the running sum of their bytes (peak
    256 B; reserved unknown)."""
    b = TraceBuilder()
    b.op("aten::empty", 0, 10)
    b.op("aten::sub", 20, 10)
    b.memory(2, 256, 256, 512)
    b.memory(22, -64, 192, 512)
    for ev in b.events:
        if ev["name"] == "[memory]":
            del ev["cat"]
            ev["args"].pop("Total Allocated")
            ev["args"].pop("Total Reserved")
    mem = memory_stats(b.context())
    (gpu,) = mem.devices
    assert (gpu.device, gpu.peak_allocated_bytes, gpu.peak_reserved_bytes) == ("GPU0", 256, None)
    assert [p[1] for p in gpu.curve] == [256, 192]
    ops = {m.name: m for m in mem.operators}
    assert ops["aten::empty"].self_allocation_bytes == 256 and ops["aten::sub"].self_increase_bytes == -64


def test_sm_efficiency_is_unknown_without_a_kernel_inside_the_steps():
    """The only kernel runs after the step's span (it was launched before the step): SM efficiency is unknown
    (None), not 0; utilization is 0 of the span."""
    b = TraceBuilder()
    op = b.op("aten::mm", 0, 5)
    b.launch("k", 1, 300, 20, op, blocks=1.0, occupancy=0.5)
    b.step(1, 100, 100)
    b.op("aten::relu", 110, 10)
    (g,) = gpu_metrics(b.context())
    assert (g.span_ns, g.utilization, g.sm_efficiency, g.achieved_occupancy) == (100 * US, 0.0, None, None)


def test_timeline_stops_at_the_profilers_own_span():
    """Kineto's ``PyTorch Profiler (0)`` event spans [0,200) µs; an instant event at 950 µs does not stretch the
    timeline: 20 buckets of 10 µs end at 200 µs; the kernel [50,70) fills buckets 5 and 6."""
    b = TraceBuilder()
    b.events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
                     "ts": 0, "dur": 200})
    b.step(1, 10, 100)
    op = b.op("aten::mm", 20, 10)
    b.launch("k", 21, 50, 20, op, blocks=0.5)
    b.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "Iteration Start: PyTorch Profiler",
                     "pid": 100, "tid": 1, "ts": 950})
    line = gpu_metrics(b.context())[0].timeline
    assert (line.end_ns, line.bucket_ns, len(line.starts_ns)) == (200 * US, 10 * US, 20)
    assert line.utilization[5] == line.utilization[6] == 1.0 and sum(line.utilization) == pytest.approx(2.0)
    assert line.sm_efficiency[5] == pytest.approx(0.5)


def test_current_tensor_core_kernels_are_tensor_core_kernels():
    """Our difference 5 from torch-tb-profiler: current cuBLAS/cuDNN/CUTLASS Tensor Core kernels count (its PyProf
    list names none of nvjet, gmma, tensorop); CUTLASS's SIMT kernels do not."""
    from lightning_streamprof.analysis.kernels import uses_tensor_cores

    for name in ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
                 "cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32", "void wgmma_kernel<128>",
                 "flash_fwd_kernel<Flash_fwd_kernel_traits<64>>"):
        assert uses_tensor_cores(name), name
    assert not uses_tensor_cores("cutlass_80_simt_sgemm_128x128_8x4_nn_align1")
    assert not uses_tensor_cores("void at::native::vectorized_elementwise_kernel<4>")


def test_tensor_core_share_is_over_all_kernel_time():
    """Our difference 6: a Tensor Core GEMM of 40 µs launched by aten::mm and a 60 µs kernel linked to no operator
    (launched outside any operator): tc_share is 40 / 100 over all kernel time (0.4.3: 40 / 40, the kernels
    operators launched); eligible_share keeps 0.4.3's denominator, 40 / 40."""
    b = TraceBuilder()
    b.step(1, 0, 200)
    b.launch("sm90_xmma_gemm_bf16bf16_bf16f32", 2, 10, 40, b.op("aten::mm", 1, 5))
    b.launch("elementwise_kernel", 100, 110, 60, 0)
    tc = tensor_core_use(b.context())
    assert (tc.kernel_ns, tc.tc_kernel_ns, tc.linked_kernel_ns) == (100 * US, 40 * US, 40 * US)
    assert tc.tc_share == pytest.approx(0.4) and tc.eligible_share == pytest.approx(1.0)
