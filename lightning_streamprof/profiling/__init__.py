"""The profiler: the Lightning-facing :class:`StreamProfiler` (hooks only), its window schedule and overhead
budget, the Kineto session, the export of traces, the analysis worker, storage and the ``"streamprof"`` name.

Names are imported on first use, so :mod:`lightning_streamprof.profiling.schedule` and ``.storage`` do not
import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "StreamProfiler": "lightning_streamprof.profiling.profiler",
    "WindowSchedule": "lightning_streamprof.profiling.schedule",
    "OverheadBudget": "lightning_streamprof.profiling.schedule",
    "WindowResult": "lightning_streamprof.profiling.exporter",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lightning_streamprof.profiling' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
