"""GPU vendors as traces show them: AMD ROCm's HIP runtime calls beside CUDA's, matrix-core kernels, AMD devices.

A ROCm build of PyTorch writes the same Kineto categories as a CUDA build (``cuda_runtime``, ``kernel``,
``gpu_memcpy``...), with HIP's runtime calls in them: ``hipLaunchKernel`` and ``hipExtModuleLaunchKernel``
(Tensile/hipBLASLt GEMMs) launch kernels like ``cudaLaunchKernel``; ``hipMemcpyWithStream`` (PyTorch's
``copy_`` without ``non_blocking``) and ``hipMemcpy`` wait for the copy like ``cudaMemcpy``;
``hip*Synchronize`` wait like their CUDA counterparts. Tensile GEMM kernels named ``Cijk_..._MI<m>x<n>x<k>_...``
run on the matrix cores (MFMA instructions), as do Composable Kernel's ``xdl``/``wmma`` kernels. AMD devices
report a wavefront of 64 threads as ``warpSize`` and their compute units as ``numSms``; Kineto gives their kernels
neither ``blocks per SM`` nor ``est. achieved occupancy %``.
"""

from __future__ import annotations

import re
from typing import Any

#: HIP calls that launch one kernel (``hipLaunchKernel`` also prefixes ``hipLaunchKernelExC``/``...GGL``)
HIP_KERNEL_LAUNCHES: tuple[str, ...] = (
    "hipLaunchKernel", "hipExtLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel",
    "hipLaunchCooperativeKernel", "hipModuleLaunchCooperativeKernel", "hipExtLaunchMultiKernelMultiDevice",
)
#: HIP calls that launch a captured graph (many kernels under one correlation id)
HIP_GRAPH_LAUNCHES: tuple[str, ...] = ("hipGraphLaunch",)
#: HIP copies in which the host waits for the copy to finish
HIP_BLOCKING_COPIES: frozenset[str] = frozenset({
    "hipMemcpy", "hipMemcpyWithStream", "hipMemcpy2D", "hipMemcpyDtoH", "hipMemcpyHtoD",
})
#: HIP copies and sets queued on a stream without waiting
HIP_ASYNC_COPIES: tuple[str, ...] = ("hipMemcpyAsync", "hipMemsetAsync", "hipMemcpy2DAsync", "hipMemsetD8Async",
                                     "hipMemsetD32Async", "hipMemcpyDtoHAsync", "hipMemcpyHtoDAsync")

#: kernels on AMD's matrix cores: Tensile/hipBLASLt ``_MI16x16x4_``-style names, Composable Kernel's XDL/WMMA
_MATRIX_CORE = re.compile(r"_MI\d+x\d+x\d+|xdlops|gemm_xdl|_xdl_|mfma|wmma", re.IGNORECASE)
_AMD_NAMES = ("AMD", "Radeon", "Instinct", "gfx")


def is_hip_call(name: str) -> bool:
    """A HIP runtime call (a ROCm trace)."""
    return name.startswith("hip")


def uses_matrix_cores(name: str) -> bool:
    """Whether an AMD kernel name is a matrix-core (MFMA/WMMA) kernel."""
    return _MATRIX_CORE.search(name) is not None


def is_amd_device(props: dict[str, Any]) -> bool:
    """Whether ``deviceProperties`` describe an AMD GPU: a 64-thread wavefront or an AMD name."""
    name = str(props.get("name") or "")
    return props.get("warpSize") == 64 or any(n in name for n in _AMD_NAMES)


def vendor(props: dict[str, Any]) -> str:
    """``"amd"`` or ``"nvidia"`` for a ``deviceProperties`` entry."""
    return "amd" if is_amd_device(props) else "nvidia"
