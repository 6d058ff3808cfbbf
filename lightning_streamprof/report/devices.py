"""One line on a device whose metrics need a word: an AMD GPU's architecture and why its SM efficiency and
occupancy are left out (ROCm's kernel events carry neither blocks per SM nor occupancy)."""

from __future__ import annotations

from lightning_streamprof.results import GpuMetrics


def device_note(gpu: GpuMetrics) -> str | None:
    """``AMD CDNA2 (...): 104 compute units, wavefront 64, 64 KiB LDS per CU, matrix cores; ...``; None for a
    device that needs no word."""
    if gpu.vendor != "amd":
        return None
    parts = [f"{gpu.num_sms} compute units" if gpu.num_sms else None,
             f"wavefront {gpu.warp_size}" if gpu.warp_size else None,
             f"{gpu.shared_memory_per_sm // 1024} KiB LDS per CU" if gpu.shared_memory_per_sm else None,
             {True: "matrix cores", False: "no matrix cores (no matrix-core advice)",
              None: "matrix cores unknown: the trace does not name the architecture (no matrix-core advice)"}
             [gpu.matrix_cores]]
    head = f"AMD {gpu.arch}" if gpu.arch else f"AMD {gpu.name or 'GPU'}"
    missing = [m for m, v in (("Est. SM efficiency", gpu.sm_efficiency), ("occupancy", gpu.achieved_occupancy))
               if v is None]
    tail = (f"; {' and '.join(missing)} n/a: ROCm's kernel events carry neither blocks per SM nor occupancy"
            if missing else "")
    return f"{head}: " + ", ".join(p for p in parts if p) + tail
