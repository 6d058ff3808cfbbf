"""The scope StreamProfiler gives each of Lightning's actions (``with trainer.profiler.profile(name): ...``).

Lightning's :meth:`Profiler.profile` is a generator context manager: about a microsecond per action on a small
CPU, some 36 actions per training step, paid by every run, a run with no profiler included. StreamProfiler hands
out a shared ``nullcontext`` for an action that no hook handles outside a window, and an :class:`ActionScope`
(a plain object, a third of the cost) for the others. :func:`scope_savings` measures what each saves against
Lightning's, so that the hooks' cost is stated against a run with no profiler.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from lightning.pytorch.profilers import PassThroughProfiler

#: calls timed for each kind of scope at setup (a few milliseconds in all)
CALIBRATION_CALLS = 2000
#: the type of the scope handed out for an action that no hook handles outside a window
QUIET_SCOPE = contextlib.nullcontext
#: the action whose scopes are timed at setup (no hook handles it)
CALIBRATION_ACTION = "streamprof-calibration"


class ActionScope:
    """``start(action)`` on entry, ``stop(action)`` on exit; an exception leaving the scope is handed to
    ``on_exception`` first (Lightning's scope yields the action's name, and so does this one)."""

    __slots__ = ("_profiler", "_action")

    def __init__(self, profiler: Any, action: str) -> None:
        self._profiler = profiler
        self._action = action

    def __enter__(self) -> str:
        self._profiler.start(self._action)
        return self._action

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        try:
            if err is not None:
                self._profiler._on_exception(err)
        finally:
            self._profiler.stop(self._action)


class _NoOps:
    """Hooks that do nothing: what a scope costs by itself."""

    def start(self, _action: str) -> None:
        return None

    def stop(self, _action: str) -> None:
        return None

    def _on_exception(self, _err: BaseException) -> None:
        return None


def _scope_seconds(make: Callable[[], Any], calls: int, clock: Callable[[], float]) -> float:
    """Seconds per ``with make(): pass`` (the best of 3 rounds)."""
    best = float("inf")
    for _ in range(3):
        t = clock()
        for _ in range(calls):
            with make():
                pass
        best = min(best, (clock() - t) / calls)
    return best


def scope_savings(quiet: Callable[[str], Any], calls: int = CALIBRATION_CALLS,
                  clock: Callable[[], float] = time.perf_counter) -> dict[type, float]:
    """Seconds that each kind of scope saves per action against Lightning's generator scope with no-op hooks (a
    run with no profiler): ``quiet(action)`` gives the profiler's scope of an action that no hook handles. A hot loop
    times each, which understates what a cold call costs either way, and so the saving too."""
    lightning = PassThroughProfiler()
    noops = _NoOps()
    base = _scope_seconds(lambda: lightning.profile(CALIBRATION_ACTION), calls, clock)
    savings = {ActionScope: base - _scope_seconds(lambda: ActionScope(noops, CALIBRATION_ACTION), calls, clock)}
    scope = quiet(CALIBRATION_ACTION)
    savings[type(scope)] = base - _scope_seconds(lambda: quiet(CALIBRATION_ACTION), calls, clock)
    return savings
