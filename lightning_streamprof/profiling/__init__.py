"""The profiler: the Lightning-facing :class:`StreamProfiler` (hooks only, :mod:`.profiler`) over one
:class:`~.stage.ProfiledStage` per stage: the window schedule and overhead budget (:mod:`.schedule`), the recorder
(:mod:`.recorder`), the Kineto session (:mod:`.session`), the export of traces and their analysis
(:mod:`.exporter`, :mod:`.worker`), logging and reporting (:mod:`.loggers`, :mod:`.run_report`), storage and the
``"streamprof"`` name (:mod:`.registration`).

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
