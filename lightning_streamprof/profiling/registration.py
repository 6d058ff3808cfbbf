"""Registration of the ``"streamprof"`` profiler name in Lightning's Trainer.

Lightning resolves ``Trainer(profiler="name")`` in ``trainer/setup.py::_init_profiler`` from a fixed dict.
``Trainer.__init__`` loads the ``lightning.pytorch.callbacks_factory`` entry points (``pytorch_lightning.``
for the standalone package) *before* it resolves the profiler, so the factories declared in
``pyproject.toml`` import this module and wrap ``_init_profiler`` in time, with no import by the user.
They add no callback. Every other name goes to Lightning's own resolver unchanged, error included.
"""

from __future__ import annotations

import importlib
from typing import Any

PROFILER_NAME = "streamprof"
_WRAPPED_MARK = "_streamprof_wrapped"


def _wrap_init_profiler(setup_module: Any) -> None:
    original = setup_module._init_profiler
    if getattr(original, _WRAPPED_MARK, False):
        return

    def _init_profiler(trainer: Any, profiler: Any) -> None:
        if isinstance(profiler, str) and profiler.strip().lower() == PROFILER_NAME:
            from lightning_streamprof.profiling.profiler import StreamProfiler

            profiler = StreamProfiler()
        original(trainer, profiler)

    setattr(_init_profiler, _WRAPPED_MARK, True)
    _init_profiler.__wrapped__ = original  # type: ignore[attr-defined]
    setup_module._init_profiler = _init_profiler


def _register(package: str) -> list:
    try:
        setup_module = importlib.import_module(f"{package}.trainer.setup")
    except ImportError:  # the other Lightning distribution is not installed
        return []
    _wrap_init_profiler(setup_module)
    return []


def register_lightning() -> list:
    """Entry point of ``lightning.pytorch.callbacks_factory``: registers the name, adds no callback."""
    return _register("lightning.pytorch")


def register_pytorch_lightning() -> list:
    """Entry point of ``pytorch_lightning.callbacks_factory``: registers the name, adds no callback."""
    return _register("pytorch_lightning")


def register() -> None:
    """Register ``"streamprof"`` in every installed Lightning distribution (importing the package does it)."""
    register_lightning()
    register_pytorch_lightning()
