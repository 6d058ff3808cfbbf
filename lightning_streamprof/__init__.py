"""Sampled Kineto profiling, trace analysis and CUDA-stream pipelining for PyTorch Lightning.

Names are imported on first use, so trace analysis (``analyze``, ``read_trace``) runs without importing
torch or Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "StreamProfiler": "lightning_streamprof.profiling.profiler",
    "StreamPipeline": "lightning_streamprof.pipeline",
    "WindowSchedule": "lightning_streamprof.profiling.schedule",
    "read_trace": "lightning_streamprof.trace",
    "TraceFormatError": "lightning_streamprof.trace",
    "analyze": "lightning_streamprof.api",
}
_SUBMODULES = ("transforms",)

__all__ = [*_EXPORTS, "transforms", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"lightning_streamprof.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lightning_streamprof' has no attribute {name!r}")
    if name == "StreamProfiler":
        from lightning_streamprof.profiling.registration import register

        register()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
