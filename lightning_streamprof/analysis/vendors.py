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


#: AMD architectures by (computeMajor, computeMinor) where that alone tells them: name, whether it has matrix cores
_AMD_ARCHS: dict[tuple[int, int], tuple[str, bool]] = {
    (9, 4): ("CDNA3 (gfx942: MI300)", True),
    (9, 5): ("CDNA4 (gfx950: MI350)", True),
}
#: computeMajor 9, minor 0 covers GCN5 (gfx906: MI50/MI60, 60-64 compute units, no matrix cores) and CDNA1/2
#: (gfx908: MI100, 120 CUs; gfx90a: MI210/MI250/MI250X, 104-110 CUs per die), told apart by their compute units
_CDNA_MIN_CUS = 100


#: Instinct model numbers in a device name, e.g. ``AMD Instinct MI250X``
_INSTINCT = re.compile(r"\bMI(\d{2,3})")
_INSTINCT_ARCHS = ((300, ("CDNA3 (gfx942: MI300)", True)), (200, ("CDNA2 (gfx90a: MI210/MI250/MI250X)", True)),
                   (100, ("CDNA1 (gfx908: MI100)", True)), (0, ("GCN5 (gfx906: MI50/MI60)", False)))


def amd_arch(props: dict[str, Any]) -> tuple[str | None, bool | None]:
    """An AMD device's architecture and whether it has matrix cores, from ``deviceProperties`` (Kineto records no
    gfx name): an Instinct model in the name, else the compute capability and compute units; ``(None, None)`` where
    the properties do not tell."""
    model = _INSTINCT.search(str(props.get("name") or ""))
    if model:
        number = int(model.group(1))
        return next(arch for floor, arch in _INSTINCT_ARCHS if number >= floor)
    major, minor = props.get("computeMajor"), props.get("computeMinor") or 0
    cus = props.get("numSms") or 0
    if (major, minor) in _AMD_ARCHS:
        return _AMD_ARCHS[(major, minor)]
    if major == 9 and minor == 0:
        if cus >= _CDNA_MIN_CUS:
            return ("CDNA2 (gfx90a: MI210/MI250/MI250X)" if cus <= 110 else "CDNA1 (gfx908: MI100)"), True
        if cus:
            return "GCN5 (gfx906: MI50/MI60)", False
    if major == 10:
        return "RDNA1/2 (gfx10)", False
    if major in (11, 12):
        return f"RDNA{major - 8} (gfx{major}, WMMA)", True
    return None, None


def matrix_cores(props: dict[str, Any]) -> bool | None:
    """Whether a device has Tensor Cores (NVIDIA, compute capability 7 or more) or matrix cores (AMD); None where
    the properties do not tell."""
    if is_amd_device(props):
        return amd_arch(props)[1]
    major = props.get("computeMajor")
    return None if major is None else major >= 7
