"""Registration of the ``"streamprof"`` profiler name in Lightning's Trainer.

Lightning resolves ``Trainer(profiler="name")`` in ``trainer/setup.py::_init_profiler`` from a fixed dict.
``Trainer.__init__`` loads the ``lightning.pytorch.callbacks_factory`` entry points (``pytorch_lightning.``
for the standalone package) *before* it resolves the profiler, so the factories declared in
``pyproject.toml`` import this module and wrap ``_init_profiler`` in time, with no import by the user.
They add no callback. Every other name goes to Lightning's own resolver unchanged, error included.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import os
import re
import sys
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
        try:
            original(trainer, profiler)
        except Exception as err:  # noqa: BLE001 - Lightning's refusal of a name, said with ours and a suggestion
            message = unknown_name_message(profiler, str(err))
            if message is None:
                raise
            if _from_lightning_cli():
                print(f"{os.path.basename(sys.argv[0]) or 'error'}: error: --trainer.profiler: {message}",
                      file=sys.stderr)
                raise SystemExit(2) from None
            raise type(err)(message) from None

    setattr(_init_profiler, _WRAPPED_MARK, True)
    _init_profiler.__wrapped__ = original  # type: ignore[attr-defined]
    setup_module._init_profiler = _init_profiler


def unknown_name_message(profiler: Any, lightning_message: str) -> str | None:
    """Lightning's message for an unknown profiler name with ``"streamprof"`` among the names and the closest ones
    suggested; None for any other error."""
    known = re.search(r"it can only be one of (\[.*\])", lightning_message)
    if not isinstance(profiler, str) or known is None:
        return None
    names = [*ast.literal_eval(known.group(1)), PROFILER_NAME]
    close = difflib.get_close_matches(profiler.strip().lower(), names, n=2, cutoff=0.6)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    return (f"Trainer(profiler={profiler!r}): not a profiler name; it can be one of {', '.join(map(repr, names))}"
            f"{hint}")


def _from_lightning_cli() -> bool:
    """Whether the Trainer is being made by LightningCLI (whose users get one line, not a traceback)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_instantiate_trainer" and frame.f_globals.get("__name__", "").endswith(".cli"):
            return True
        frame = frame.f_back
    return False


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
