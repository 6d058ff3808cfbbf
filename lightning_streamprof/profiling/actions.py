"""Lightning's actions as StreamProfiler sees them: the one that starts a step, those that end one early, those that
need a hook outside a window, and the scope each gets from ``profile()``.

Lightning calls ``start`` and ``stop`` around its actions, some 36 per training step, most of them through
``profile()``, whose own scope (a generator context manager, about a microsecond per action on a small CPU) a run
with no profiler pays too. Outside a window most actions need nothing: :class:`QuietActions` remembers them, so that
the hooks return at once and ``profile()`` hands out a shared no-op scope; the others get an :class:`ActionScope`, a
plain object. It is kept because it pays on real workloads: on an H200 the hooks cost 45-90 µs per step through
Lightning's scope (0.4-1.2% of the training time of a ViT-S/16 probe, a frozen-backbone segmentation and a frozen
ResNet-50), -6 to +18 µs with this (``hook_s_per_step`` in ``benchmarks/results/profiler-overhead/profiler_overhead-h200-overhead-c``
and ``pipeline_runs-h200-profiled-resnet50-idle`` before, ``profiler_overhead-h200-late`` and ``-segdev`` after, as
the profiler then timed them); one step's actions replayed mid-fit take 6.7 µs
through it, 23.2 µs with no profiler and 29.1 µs through Lightning's scope (``benchmarks/hook_cost.py``). The hooks'
cost is measured there, not by the profiler.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from lightning_streamprof.profiling.loop_time import concerns

#: the action that starts a step, per stage (Lightning's loops name it ``[<LoopClass>].<prefix>_next``)
STEP_ACTIONS = {"fit": ".train_dataloader_next", "validate": ".val_next", "test": ".test_next",
                "predict": ".predict_next"}
#: a suffix no action has: a stage without steps
_NO_STEP = "\0never"
#: action names remembered (Lightning's repeat every step; a program's own ``profile(f"...{i}")`` names need not)
_REMEMBERED = 1024


def step_action(stage: str) -> str:
    """The suffix of the action that starts each of ``stage``'s steps."""
    return STEP_ACTIONS.get(stage, _NO_STEP)


def ends_training_step(action: str) -> bool:
    """Actions that run between training steps (validation, epoch end, checkpoints) close the open step."""
    return (
        "validation" in action
        or action.startswith("[_EvaluationLoop]")
        or action == "save_checkpoint"
        or action.endswith("on_train_epoch_end")
    )


class QuietActions:
    """The actions that no hook handles outside a window, each with its shared no-op scope (in :attr:`scopes`),
    among the first names seen; the step's action and :class:`~.loop_time.LoopTime`'s are handled."""

    def __init__(self, step_suffix: str) -> None:
        self.scopes: dict[str, contextlib.nullcontext[str]] = {}
        self._handled: set[str] = set()
        self._step_suffix = step_suffix

    def learn(self, action: str) -> None:
        """Remember whether a hook handles ``action`` outside a window."""
        if action in self._handled or action in self.scopes or len(self._handled) + len(self.scopes) >= _REMEMBERED:
            return
        if concerns(action) or action.endswith(self._step_suffix):
            self._handled.add(action)
        else:
            self.scopes[action] = contextlib.nullcontext(action)  # yields the name, as Lightning's scope does


class ActionScope:
    """``start(action)`` on entry, ``stop(action)`` on exit; an exception leaving the scope goes to ``failed`` first
    (Lightning's scope yields the action's name, and so does this one)."""

    __slots__ = ("_start", "_stop", "_failed", "_action")

    def __init__(self, start: Callable[[str], None], stop: Callable[[str], None],
                 failed: Callable[[BaseException], None], action: str) -> None:
        self._start, self._stop, self._failed, self._action = start, stop, failed, action

    def __enter__(self) -> str:
        self._start(self._action)
        return self._action

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        try:
            if err is not None:
                self._failed(err)
        finally:
            self._stop(self._action)
