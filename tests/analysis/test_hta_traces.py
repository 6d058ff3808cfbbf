"""HTA's analyses on real traces, against the numbers HolisticTraceAnalysis 0.5.0 computes on them, and ROCm traces.

HTA's numbers below come from running HTA itself (``benchmarks/_hta_oracle.py``; the whole comparison is
``benchmarks/hta_parity.py``). Ours are computed on :func:`hta_view` of the trace (the events HTA keeps, rounded as
HTA rounds them), so they must be equal; the differences of definition are documented in each module.
"""

import os

import pytest

from lightning_streamprof.analysis import analyze_table
from lightning_streamprof.analysis.user_ranges import annotation_times
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.hta_compat import hta_view
from lightning_streamprof.analysis.idle import idle_time
from lightning_streamprof.analysis.kernels import tensor_core_use, uses_tensor_cores
from lightning_streamprof.analysis.launches import launch_stats
from lightning_streamprof.analysis.queue import queue_lengths
from lightning_streamprof.analysis.sequences import kernel_sequences
from lightning_streamprof.analysis.vendors import is_amd_device, uses_matrix_cores
from lightning_streamprof.trace import read_trace
from tracebuilder import TraceBuilder

TRACES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "traces")
AMD = os.path.join(TRACES, "hta", "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
SAMPLED = os.path.join(TRACES, "hta", "sampled_rank-0.json.gz")
US = 1000
HTA_LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")


@pytest.fixture(scope="module")
def sampled():
    return TraceContext(hta_view(read_trace(SAMPLED)))


def test_sampled_idle_equals_hta(sampled):
    """HTA: host wait 958,796 µs, kernel wait 2,070, other 309,639 over the trace's five streams."""
    streams = idle_time(sampled).streams
    assert {s.stream for s in streams} == {7, 23, 25, 84, 203}
    assert sum(s.host_wait_ns for s in streams) == 958_796 * US
    assert sum(s.kernel_wait_ns for s in streams) == 2_070 * US
    assert sum(s.other_ns for s in streams) == 309_639 * US


def test_sampled_launch_stats_equal_hta(sampled):
    """HTA's four call names: 602 launches, CPU 5,109 µs, GPU 302,241, delay 9,880,122; 140 short, no runtime
    outlier, 469 delay outliers."""
    rows = [r for r in launch_stats(sampled).launches if r.name in HTA_LAUNCH_NAMES]
    total = lambda field: sum(getattr(r, field) for r in rows)  # noqa: E731
    assert total("launches") == 602
    assert (total("cpu_ns"), total("gpu_ns"), total("delay_ns")) == (5_109 * US, 302_241 * US, 9_880_122 * US)
    assert (total("short"), total("runtime_outliers"), total("delay_outliers")) == (140, 0, 469)


def test_sampled_operator_delays_equal_hta(sampled):
    """HTA: 487 operator instances; summed first-launch delay 12,476 µs and runtime delay 6,712,799 µs (HTA's means
    times counts). HTA has 179 (operator, sequence) groups to our 172: where an operator and its child start in the
    same microsecond, HTA's "latest start" may take the parent (aten::matmul for aten::mm)."""
    ops = launch_stats(sampled, limit=1000).operators
    assert sum(o.count for o in ops) == 487
    assert sum(o.launch_delay_ns for o in ops) == 12_476 * US
    assert sum(o.runtime_delay_ns for o in ops) == 6_712_799 * US


def test_sampled_queue_equals_hta(sampled):
    """HTA's get_queue_length_summary, stream 7: 1,052 points, mean 23.6198, max 76; stream 25: 16, 4.0, 8."""
    q = {s.stream: s for s in queue_lengths(sampled).streams}
    assert (q[7].points, q[7].max_length, q[7].min_length) == (1052, 76, 0)
    assert q[7].point_mean == pytest.approx(23.619771863117872)
    assert (q[25].points, q[25].point_mean, q[25].max_length) == (16, 4.0, 8)
    assert sum(s.blocked_ns for s in q.values()) == 0


def test_sampled_sequences_equal_hta(sampled):
    """HTA's frequent sequences under the top operator: two patterns of one instance each."""
    op = kernel_sequences(sampled).sequences[0].operator
    seqs = kernel_sequences(sampled, op).sequences
    assert [s.count for s in seqs] == [1, 1]


def test_lightning_gpu_spans_equal_hta():
    """HTA's get_gpu_user_annotation_breakdown on an H200 Lightning trace (µs): Optimizer.step 16,520,
    on_after_batch_transfer 9,047, transfer_batch_to_device 374, training_step 8,131. Our launch-based time adds what
    Kineto's GPU-side copies miss: backward's kernels come from the autograd thread (9.4 ms; its copy says 0)."""
    ctx = TraceContext(hta_view(read_trace(os.path.join(TRACES, "streamprof_augment.pt.trace.json.gz"))))
    rows = {r.name: r for r in annotation_times(ctx).rows}
    pl = "[pl][profile]"
    expected = {"Optimizer.step#SGD.step": 16_520, f"{pl}[LightningModule]Classifier.on_after_batch_transfer": 9_047,
                f"{pl}[LightningModule]Classifier.transfer_batch_to_device": 374,
                f"{pl}[Strategy]SingleDeviceStrategy.training_step": 8_131}
    assert {n: rows[n].gpu_span_ns // US for n in expected} == expected
    backward = rows[f"{pl}[Strategy]SingleDeviceStrategy.backward"]
    assert backward.gpu_span_ns == 0 and backward.device_ns > 9 * 1000 * US


def test_lightning_hooks_add_up_to_the_device_time():
    """The self times of every range plus what was launched outside them and what has no launch call make all the
    device time."""
    for name in ("streamprof_augment", "frozen_backbone", "lightning_pytorchprofiler_augment"):
        times = annotation_times(TraceContext(read_trace(os.path.join(TRACES, f"{name}.pt.trace.json.gz"))))
        assert (sum(r.self_device_ns for r in times.rows) + times.outside_device_ns + times.unlinked_device_ns
                == times.device_ns)


# ---------------------------------------------------------------------------------------------------- ROCm
def test_amd_fixture_counts_launches_and_no_tensor_core_advice():
    """HTA's MI250 trace: 7 HIP launches (hipLaunchKernel, hipExtModuleLaunchKernel) on the training thread inside
    the steps, both hipMemcpyWithStream copies wait for the device, the two Tensile ``_MI16x16x1_`` GEMMs run on the
    matrix cores, so no Tensor Core advice."""
    result = analyze_table(read_trace(AMD))
    assert result.host.launches == 7 and result.host.graph_launches == 0
    assert result.syncs.calls == 2 and result.syncs.causes[0].operator == "aten::copy_"
    assert {k.name.startswith("Cijk_") for k in result.kernels if k.tensor_cores} == {True}
    assert sum(k.tensor_cores for k in result.kernels) == 2
    assert result.tensor_cores.tc_kernel_ns == 30_240
    assert "tensor_cores" not in {r.id for r in result.recommendations}
    host = next(r for r in result.recommendations if r.id == "host_bound")
    assert host.evidence["launches_per_step"] == 3.5


def test_amd_fixture_hta_numbers():
    """HTA on the MI250 trace: host wait 8,780 µs on stream 0 (ours on the raw trace, at ns: 8,762.845); queue: 32
    points, mean 0.5, max 1. HTA's launch statistics pair no HIP call (0 launches; ours: 16)."""
    view = TraceContext(hta_view(read_trace(AMD)))
    (stream,) = idle_time(view).streams
    assert (stream.stream, stream.host_wait_ns, stream.kernel_wait_ns, stream.other_ns) == (0, 8_780 * US, 0, 0)
    assert idle_time(TraceContext(read_trace(AMD))).streams[0].host_wait_ns == 8_762_845
    (q,) = queue_lengths(view).streams
    assert (q.points, q.point_mean, q.max_length) == (32, 0.5, 1)
    assert sum(r.launches for r in launch_stats(view).launches) == 16


def rocm_trace(kernel: str):
    b = TraceBuilder()
    b.device_properties({"id": 0, "name": "AMD Instinct MI250X", "warpSize": 64, "numSms": 104, "computeMajor": 9,
                         "totalGlobalMem": 64 * 2**30})
    b.step(1, 0, 100)
    mm = b.op("aten::mm", 10, 20)
    b.launch(kernel, 12, 20, 40, mm, rt_name="hipExtModuleLaunchKernel")
    copy = b.op("aten::copy_", 60, 20)
    b.launch("Memcpy DtoH (Device -> Host)", 61, 65, 5, copy, cat="gpu_memcpy", rt_name="hipMemcpyWithStream",
             rt_dur=15)
    b.runtime("hipDeviceSynchronize", 85, 10, 900)
    b.launch("void at::native::vectorized_elementwise_kernel<4>", 96, 97, 1, 900, rt_name="hipLaunchKernel")
    return b


def test_built_rocm_trace():
    """A matrix-core GEMM launched by hipExtModuleLaunchKernel and an elementwise kernel by hipLaunchKernel: 2
    launches; hipMemcpyWithStream (15 µs) and hipDeviceSynchronize (10 µs) are synchronising waits; the GEMM is a
    Tensor (matrix) Core kernel, so aten::mm's kernel time is not "without Tensor Cores"."""
    result = analyze_table(rocm_trace("Cijk_Ailk_Bljk_SB_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1").table())
    assert result.host.launches == 2
    assert (result.syncs.calls, result.syncs.wait_ns) == (2, 25 * US)
    assert result.tensor_cores.eligible_without_tc_ns == 0 and result.tensor_cores.tc_kernel_ns == 40 * US
    assert "tensor_cores" not in {r.id for r in result.recommendations}


def test_built_rocm_trace_without_matrix_cores_is_advised():
    """The same GEMM as a VALU Tensile kernel (no ``_MI`` instruction tag): eligible time without matrix cores."""
    ctx = rocm_trace("Cijk_Ailk_Bljk_SB_MT64x64x8_SE_1LDSB0_APM1").context()
    assert tensor_core_use(ctx).eligible_without_tc_ns == 40 * US
    result = analyze_table(ctx.table)
    assert "tensor_cores" in {r.id for r in result.recommendations}


def test_matrix_core_names():
    assert uses_matrix_cores("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN")
    assert uses_matrix_cores("ck::kernel_gemm_xdl_cshuffle_v1<...>")
    assert not uses_matrix_cores("Cijk_Ailk_Bljk_SB_MT64x64x8_SE")
    assert not uses_matrix_cores("void at::native::elementwise_kernel<128, 2>")
    assert uses_tensor_cores("Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1")
    assert is_amd_device({"name": "AMD Radeon Graphics", "warpSize": 64})
    assert not is_amd_device({"name": "NVIDIA H200", "warpSize": 32})
