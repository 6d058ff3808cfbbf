import pytest
from handbuilt import ELEMENTWISE, GEMM, NCCL, US, build

from lightning_streamprof.analysis.frames import is_user_frame
from lightning_streamprof.analysis.kernels import kernel_stats, tensor_core_use, uses_tensor_cores
from lightning_streamprof.analysis.operators import operator_stats
from lightning_streamprof.analysis.source import source_lines


def test_kernel_stats_by_hand():
    """GEMM: k1 40 µs (0.5 blocks, occ .25) and k3 80 µs (2.0, .75); elementwise: k2 50 µs (1.0, .5) and k4 20 µs
    (0.2, .1); NCCL: 10 µs, no occupancy."""
    stats = {s.name: s for s in kernel_stats(build().context())}
    assert list(stats) == [GEMM, ELEMENTWISE, NCCL]  # by total time
    g = stats[GEMM]
    assert (g.calls, g.total_ns, g.mean_ns, g.max_ns, g.min_ns) == (2, 120 * US, 60 * US, 80 * US, 40 * US)
    assert g.blocks_per_sm == pytest.approx((0.5 * 40 + 2.0 * 80) / 120)
    assert g.occupancy == pytest.approx((0.25 * 40 + 0.75 * 80) / 120)
    assert g.tensor_cores
    e = stats[ELEMENTWISE]
    assert (e.calls, e.total_ns, e.max_ns, e.min_ns) == (2, 70 * US, 50 * US, 20 * US)
    assert e.blocks_per_sm == pytest.approx((1.0 * 50 + 0.2 * 20) / 70)
    assert e.occupancy == pytest.approx((0.5 * 50 + 0.1 * 20) / 70)
    assert not e.tensor_cores
    assert stats[NCCL].occupancy is None and stats[NCCL].blocks_per_sm == pytest.approx(0.1)


def test_tensor_core_use_by_hand():
    """TC kernels: the two GEMMs, 120 of 200 µs. TC-eligible (aten::mm) kernels: k1, k2, k4 = 110 µs, of which
    k2 + k4 = 70 µs without Tensor Cores; all 200 µs of kernels are linked to an operator."""
    tc = tensor_core_use(build().context())
    assert (tc.kernel_ns, tc.tc_kernel_ns) == (200 * US, 120 * US)
    assert tc.tc_share == pytest.approx(0.6)
    assert tc.eligible_kernel_ns == 110 * US and tc.eligible_share == pytest.approx(110 / 200)
    assert tc.eligible_without_tc_ns == 70 * US and tc.eligible_without_tc


@pytest.mark.parametrize(
    "name, used",
    [
        ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", True),
        ("nvjet_sm90_tst_64x16_64x16_2x1_v_bz_NNT", True),
        ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_64x64_64x5_nhwc>", True),
        ("volta_h884gemm_64x64_ldg8_nn", True),
        ("ampere_sgemm_128x64_nn", False),
        ("cutlass_80_simt_sgemm_128x64_8x5_nn_align1", False),
        ("void at::native::vectorized_elementwise_kernel<4>", False),
    ],
)
def test_tensor_core_kernel_names(name, used):
    assert uses_tensor_cores(name) is used


def test_operator_host_device_self_and_total():
    """linear [9,45) holds mm [10,40): host self 36 - 30 = 6. Self time also leaves out the operator's own CUDA
    runtime calls (torch's self time since 1.8, torch-tb-profiler's definition): mm's launches take 4 + 4 + 1 µs,
    so its host self time is 30 - 9 = 21; add's 3 + 5 + 1 (20 - 9 = 11); nccl:all_reduce's 2 (7 - 2 = 5).
    mm launched k1 + k2 + k4 = 110 µs; add launched k3 80, memcpy 10, memset 5 = 95; nccl:all_reduce its 10 µs
    kernel. linear's device total includes mm's 110."""
    stats = {s.name: s for s in operator_stats(build().context())}
    assert (stats["aten::linear"].host_self_ns, stats["aten::linear"].host_total_ns) == (6 * US, 36 * US)
    assert (stats["aten::linear"].device_self_ns, stats["aten::linear"].device_total_ns) == (0, 110 * US)
    assert (stats["aten::mm"].host_self_ns, stats["aten::mm"].device_self_ns) == (21 * US, 110 * US)
    assert stats["aten::add"].host_self_ns == 11 * US and stats["nccl:all_reduce"].host_self_ns == 5 * US
    assert stats["aten::mm"].device_total_ns == 110 * US
    assert stats["aten::add"].device_self_ns == stats["aten::add"].device_total_ns == 95 * US
    assert stats["nccl:all_reduce"].device_self_ns == 10 * US
    assert stats["aten::relu"].device_total_ns == 0 and stats["aten::relu"].calls == 1
    assert [s.name for s in operator_stats(build().context())[:2]] == ["aten::mm", "aten::add"]


def test_operator_grouping_by_shapes():
    b = build()
    b.op("aten::mm", 300, 5, **{"Input Dims": [[1, 2], [2, 3]]})
    b.op("aten::mm", 310, 5, **{"Input Dims": [[8, 4], [4, 2]]})
    stats = operator_stats(b.context(), by_shapes=True)
    mm = {s.input_shapes: s for s in stats if s.name == "aten::mm"}
    assert set(mm) == {"[[8,4],[4,2]]", "[[1,2],[2,3]]"}
    assert mm["[[8,4],[4,2]]"].calls == 2 and mm["[[8,4],[4,2]]"].host_self_ns == (21 + 5) * US
    assert mm["[[1,2],[2,3]]"].calls == 1
    relu = next(s for s in stats if s.name == "aten::relu")
    assert relu.input_shapes is None


def test_source_lines_by_hand():
    """model.py:20 wraps linear + mm: host self 6 + 21, device 110 = 137 µs. train.py:10 wraps add (11 + 95),
    relu (8) and nccl:all_reduce (5 + 10) = 129 µs. All operators: host 51 + device 215 = 266 µs. The torch frame
    between model.py and the operators is skipped; the frame on thread 2 is not used."""
    lines = source_lines(build().context())
    assert [(s.location, s.function) for s in lines] == [("model.py:20", "forward"), ("train.py:10", "training_step")]
    assert (lines[0].host_self_ns, lines[0].device_self_ns) == (27 * US, 110 * US)
    assert (lines[1].host_self_ns, lines[1].device_self_ns) == (24 * US, 105 * US)
    assert lines[0].share == pytest.approx(137 / 266) and lines[1].share == pytest.approx(129 / 266)


@pytest.mark.parametrize(
    "name, user",
    [
        ("train.py(10): training_step", True),
        ("examples/frozen.py(3): forward", True),
        ("torch/nn/modules/module.py(1751): _call_impl", False),
        ("lightning/pytorch/loops/fit_loop.py(216): run", False),
        ("threading.py(1012): run", False),
        ("multiprocessing/connection.py(429): _recv_bytes", False),
        ("<built-in method run_backward of torch._C._EngineBase object at 0x7f>", False),
        ("/usr/lib/python3/site-packages/foo/bar.py(3): f", False),
        ("nn.Module: Conv2d_3", False),
    ],
)
def test_user_frames(name, user):
    assert is_user_frame(name) is user


def test_the_line_that_starts_the_run_is_not_a_hot_line():
    """The script's ``LightningCLI(...)`` frame encloses whole steps: what Lightning runs inside a step (the
    backward here) is not that line's; the step's own user code (``training_step``) keeps its operators."""
    from tracebuilder import TraceBuilder

    b = TraceBuilder()
    b.frame("train.py(30): <module>", 0, 1000)
    b.step(1, 100, 100)
    b.frame("model.py(12): training_step", 110, 40)
    b.op("aten::mm", 120, 10)
    b.op("autograd::engine::evaluate_function: MmBackward0", 160, 20)
    lines = source_lines(b.context())
    assert [(s.location, s.function, s.host_self_ns) for s in lines] == [("model.py:12", "training_step", 10_000)]
