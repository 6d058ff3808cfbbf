"""Per-kernel statistics and Tensor Core use.

A kernel uses Tensor Cores when its name contains one of :data:`TC_KERNEL_PATTERNS`: torch-tb-profiler's
allow-list (from NVIDIA PyProf) plus the names of current cuDNN/cuBLAS/CUTLASS Tensor Core kernels
(``sm80_xmma``/``sm90_xmma``, ``nvjet``, ``tensorop``, ``gmma``...), which the old list misses, and AMD's
matrix-core kernels (Tensile's ``Cijk_..._MI16x16x1_...``, see :mod:`lightning_streamprof.analysis.vendors`),
which count as Tensor Core kernels everywhere below. An operator is Tensor Core eligible when its name is in
:data:`TC_ELIGIBLE_OPS` (torch-tb-profiler's list, which follows autocast's lower-precision ops, plus the current
autograd and attention names).
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof.analysis._links import group
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.vendors import uses_matrix_cores
from lightning_streamprof.results import KernelStats, TensorCoreUse, sort_kernels

TC_KERNEL_PATTERNS: tuple[str, ...] = (
    "h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816", "dgrad_1x1_stride_2x2",
    "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1", "direct_group", "xmma_implicit_gemm",
    "xmma_sparse_conv", "xmma_warp_specialized_implicit_gemm", "xmma_gemm", "xmma_sparse_gemm", "c1688",
    # current libraries
    "xmma", "nvjet", "tensorop", "gmma", "wgmma", "s16816", "h16816", "bf16816", "i16832", "tensor16x8",
    "fmha", "flash_fwd", "flash_bwd", "cutlass3x", "cublaslt_tensorop",
)

TC_ELIGIBLE_OPS: frozenset[str] = frozenset({
    "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_tbc",
    "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d", "aten::convolution",
    "aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::prelu", "aten::addmm", "aten::addmv",
    "aten::addr", "aten::matmul", "aten::mm", "aten::mv", "aten::linear", "aten::addbmm", "aten::baddbmm",
    "aten::bmm", "aten::chain_matmul", "aten::linalg_multi_dot", "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_gru_cell", "aten::lstm_cell", "aten::gru_cell", "aten::rnn_tanh_cell",
    "aten::rnn_relu_cell", "CudnnConvolutionBackward", "BmmBackward0", "aten::cudnn_convolution_transpose_backward",
    "CudnnConvolutionTransposeBackward", "MmBackward", "aten::cudnn_convolution_backward_weight", "aten::addmm_",
    "AddmvBackward", "MvBackward", "aten::cudnn_convolution_transpose_backward_weight",
    "aten::cudnn_convolution_transpose_backward_input", "AddmmBackward", "aten::cudnn_convolution_backward_input",
    "AddbmmBackward", "aten::cudnn_convolution_backward",
    # current names
    "aten::convolution_backward", "aten::_addmm_activation", "aten::_scaled_mm",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward",
    "aten::_flash_attention_backward", "aten::_efficient_attention_forward", "aten::_efficient_attention_backward",
})


#: kernel names of half or bfloat16 data (templates' type names, cuDNN/cuBLAS/CUTLASS data-type tags): a run with
#: such kernels already uses reduced precision (Lightning's ``bf16-mixed``/``16-mixed``, autocast)
REDUCED_PRECISION_PATTERNS: tuple[str, ...] = ("BFloat16", "bfloat16", "bf16", "c10::Half", "__half", "fp16", "f16",
                                               "h884", "h1688", "h16816")


def reduced_precision(name: str) -> bool:
    """Whether a kernel works on half or bfloat16 data (by its name)."""
    return any(p in name for p in REDUCED_PRECISION_PATTERNS)


def uses_tensor_cores(name: str) -> bool:
    """Whether a kernel name is a Tensor Core kernel (CUTLASS SIMT kernels are not), or an AMD matrix-core one."""
    if "simt" in name.lower():
        return False
    return any(p in name for p in TC_KERNEL_PATTERNS) or uses_matrix_cores(name)


def _weighted(values: np.ndarray, weights: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """Per group: Σ value × weight / Σ weight, missing values counted as 0 (as torch-tb-profiler does)."""
    v = np.nan_to_num(values.astype(np.float64), nan=0.0)
    num = np.bincount(groups, weights=v * weights, minlength=n)
    den = np.bincount(groups, weights=weights, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def kernel_stats(ctx: TraceContext) -> list[KernelStats]:
    """Statistics per kernel name, largest total time first."""
    table = ctx.table
    rows = ctx.kernels
    if rows.size == 0:
        return []
    codes, groups = group(table.name[rows])
    n = codes.size
    dur = table.dur[rows].astype(np.int64)
    calls = np.bincount(groups, minlength=n)
    total = np.bincount(groups, weights=dur, minlength=n)
    mx = np.full(n, np.iinfo(np.int64).min)
    mn = np.full(n, np.iinfo(np.int64).max)
    np.maximum.at(mx, groups, dur)
    np.minimum.at(mn, groups, dur)
    weights = dur.astype(np.float64)
    bps = table.blocks_per_sm[rows]
    occ = table.occupancy[rows]
    has_b = np.bincount(groups, weights=(~np.isnan(bps)).astype(float), minlength=n) > 0
    has_o = np.bincount(groups, weights=(~np.isnan(occ)).astype(float), minlength=n) > 0
    blocks = _weighted(bps, weights, groups, n)
    occupancy = _weighted(occ, weights, groups, n)
    tc = ctx.flags(uses_tensor_cores)
    return sort_kernels(
        KernelStats(
            name=table.names[codes[g]],
            calls=int(calls[g]),
            total_ns=int(total[g]),
            mean_ns=float(total[g] / calls[g]),
            max_ns=int(mx[g]),
            min_ns=int(mn[g]),
            blocks_per_sm=float(blocks[g]) if has_b[g] else None,
            occupancy=float(occupancy[g]) if has_o[g] else None,
            tensor_cores=bool(tc[codes[g]]),
        )
        for g in range(n)
    )


def _is_eligible(name: str) -> bool:
    return name in TC_ELIGIBLE_OPS


def tensor_core_use(ctx: TraceContext) -> TensorCoreUse:
    """Tensor Core share of all kernel time, and the kernel time of TC-eligible operators (by External id)."""
    rows = ctx.kernels
    dur = ctx.table.dur[rows].astype(np.int64)
    tc = ctx.mask(rows, uses_tensor_cores)
    ops = ctx.kernel_owner
    linked = ops >= 0
    eligible = np.zeros(rows.size, bool)
    eligible[linked] = ctx.mask(ops[linked], _is_eligible)
    return TensorCoreUse.of(
        kernel_ns=int(dur.sum()),
        tc_kernel_ns=int(dur[tc].sum()),
        linked_kernel_ns=int(dur[linked].sum()),
        eligible_kernel_ns=int(dur[eligible].sum()),
        eligible_without_tc_ns=int(dur[eligible & ~tc].sum()),
    )
