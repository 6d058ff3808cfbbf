"""Sampled Kineto profiling, trace analysis and CUDA-stream pipelining for PyTorch Lightning."""

__version__ = "0.1.0"

from lightning_streamprof._lightning import register as _register
from lightning_streamprof.profiler import StreamProfiler
from lightning_streamprof.schedule import WindowSchedule
from lightning_streamprof.trace import TraceFormatError, read_trace

_register()

__all__ = ["StreamProfiler", "TraceFormatError", "WindowSchedule", "__version__", "read_trace"]
