"""What the profiler reads of a staging callback's own state (``StreamPipeline.state``, a
:class:`~lightning_streamprof.pipeline.state.PipelineState`): whether a window waits for the callback's choice of
way, the way each recorded step ran (:class:`WayLog`, written into the window's trace), and the callback's state as
typed data for the recommendations (:func:`pipeline_run`). The state is read only when a window is due or recording,
and at the end of a stage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightning_streamprof.results import PipelineRun, WindowWay

#: labels of the ways a window lists at the most (``auto``'s trials alternate a few ways)
MAX_WAYS = 8


def stateful(callbacks: Sequence[Any]) -> tuple[Any, ...]:
    """The callbacks among ``callbacks`` (the staging ones) that say what they do through a ``state``."""
    return tuple(cb for cb in callbacks if hasattr(type(cb), "state") or "state" in getattr(cb, "__dict__", ()))


def choosing(callbacks: Sequence[Any]) -> str | None:
    """The name of the first callback that has not made its first choice of way yet (``state.deciding``), else None."""
    for cb in callbacks:
        if cb.state.deciding:
            return type(cb).__name__
    return None


def timing_ways(callbacks: Sequence[Any]) -> bool:
    """Whether a callback is choosing its way or timing ways (``auto``'s trials): its steps say nothing of the run."""
    return any((state := cb.state).deciding or state.in_trials for cb in callbacks)


def pipeline_run(callback: Any) -> PipelineRun:
    """A callback's ``state`` now, as the results' :class:`~lightning_streamprof.results.PipelineRun`."""
    state = callback.state
    way = state.way
    return PipelineRun(mode=str(state.mode), name=type(callback).__name__, way=str(way.label), staged=bool(way.staged),
                       thread=bool(way.thread), graph=bool(way.graph), graphed=bool(state.graphed),
                       deciding=bool(state.deciding), in_trials=bool(state.in_trials),
                       staged_calls=int(state.staged_calls))


def run_pipeline(callbacks: Sequence[Any]) -> PipelineRun | None:
    """What the first of the ``callbacks`` with a state does now (None without one, or when its state cannot be
    read: a report is never stopped by it)."""
    try:
        return pipeline_run(callbacks[0]) if callbacks else None
    except Exception:  # noqa: BLE001 - a callback's state is a courtesy; the report goes on without it
        return None


class WayLog:
    """The ways of one window's recorded steps: :meth:`add` at each recorded step (the first one gives
    :attr:`first`), :meth:`result` once the window ends."""

    def __init__(self) -> None:
        self.first: PipelineRun | None = None
        self.ways: list[str] = []
        self.in_trials = False

    def add(self, callbacks: Sequence[Any]) -> None:
        """The way the first callback with a state runs the step that starts."""
        if not callbacks:
            return
        if self.first is None:
            self.first = pipeline_run(callbacks[0])
            label, in_trials = self.first.way, self.first.in_trials
        else:
            state = callbacks[0].state
            label, in_trials = str(state.way.label), bool(state.in_trials)
        if label not in self.ways and len(self.ways) < MAX_WAYS:
            self.ways.append(label)
        self.in_trials = self.in_trials or in_trials

    def result(self) -> WindowWay | None:
        """The window's ways (None when no recorded step had a callback with a state)."""
        if self.first is None:
            return None
        return WindowWay(first=self.first, ways=list(self.ways), in_trials=self.in_trials)
