"""Where the profiling windows fall in a run (:class:`WindowSchedule`, step numbers only) and how far the
overhead budget moves them (:class:`OverheadBudget`, timings only); no torch."""

from __future__ import annotations

import enum
import math
import statistics
from collections import deque
from dataclasses import dataclass

from lightning_streamprof.profiling.arguments import check_int


class Phase(enum.Enum):
    IDLE = "idle"
    WARMUP = "warmup"
    ACTIVE = "active"


@dataclass(frozen=True)
class Window:
    """One profiling window: warm-up steps ``[warmup_start, start)``, recorded steps ``[start, stop)``."""

    index: int
    warmup_start: int
    start: int
    stop: int

    def phase(self, step: int) -> Phase:
        if self.start <= step < self.stop:
            return Phase.ACTIVE
        if self.warmup_start <= step < self.start:
            return Phase.WARMUP
        return Phase.IDLE


@dataclass(frozen=True)
class WindowSchedule:
    """Sampled windows across a whole run.

    Steps ``0 .. skip_first-1`` are never profiled. Window ``k`` warms up for ``warmup`` steps and records
    ``active`` steps starting at step ``skip_first + warmup + k * every``. ``every=0`` gives a single
    window; ``repeat > 0`` stops after that many windows.
    """

    skip_first: int = 20
    warmup: int = 2
    active: int = 3
    every: int = 0
    repeat: int = 0

    def __post_init__(self) -> None:
        for name in ("skip_first", "warmup", "active", "every", "repeat"):
            check_int("WindowSchedule", name, getattr(self, name), 1 if name == "active" else 0)
        if self.every and self.every < self.warmup + self.active:
            raise ValueError(
                f"WindowSchedule: `every` ({self.every}) must be 0 (one window) or at least"
                f" warmup + active ({self.warmup + self.active}) so that windows do not overlap"
            )

    @property
    def max_windows(self) -> int | None:
        """How many windows the schedule allows, ``None`` for unlimited."""
        if self.every == 0:
            return 1
        return self.repeat or None

    def window(self, index: int, not_before: int = 0) -> Window | None:
        """Window ``index`` on the ``every`` grid, moved to the first grid point whose warm-up starts at or
        after step ``not_before``; ``None`` past the ``repeat`` limit or for a later window of a one-window
        schedule."""
        limit = self.max_windows
        if limit is not None and index >= limit:
            return None
        start = self.skip_first + self.warmup + index * self.every
        if start - self.warmup < not_before:
            if self.every == 0:
                start = not_before + self.warmup
            else:
                grid_steps = -(-(not_before + self.warmup - start) // self.every)
                start += grid_steps * self.every
        return Window(index=index, warmup_start=start - self.warmup, start=start, stop=start + self.active)

    def windows_until(self, total_steps: int) -> list[Window]:
        """All windows whose recorded steps begin before ``total_steps`` (no deferral)."""
        windows = []
        index = 0
        while (w := self.window(index)) is not None and w.start < total_steps:
            windows.append(w)
            index += 1
            if self.every == 0:
                break
        return windows


class OverheadBudget:
    """The profiler's measured cost against a share of training time.

    A window's cost is each of its steps' slowdown against the median unprofiled step (the last
    ``baseline_steps`` of them), plus the profiler's own time, for the window's steps and ``tail_steps`` after
    it (trace post-processing and export slow them too). :meth:`defer_steps` says how many steps the next window
    must wait so that the cost of all windows stays within ``max_overhead`` of the training time so far.
    """

    def __init__(self, max_overhead: float | None, tail_steps: int = 2, baseline_steps: int = 64) -> None:
        self.max_overhead = max_overhead
        self.tail_steps = tail_steps
        self.total_cost = 0.0
        self.window_cost = 0.0
        self._baseline: deque[float] = deque(maxlen=baseline_steps)
        self._tail_left = 0

    def unprofiled_step(self, seconds: float) -> None:
        """A step outside windows and their tails: part of the baseline."""
        self._baseline.append(seconds)

    def begin_window(self) -> None:
        self.window_cost = 0.0
        self._tail_left = 0

    def end_window(self) -> None:
        """The window's trace is stopped: its tail steps are charged next."""
        self._tail_left = self.tail_steps

    def charge(self, seconds: float, own: float, tainted: bool) -> None:
        """Charge a window or tail step of ``seconds``, ``own`` of them spent in the profiler itself; a
        ``tainted`` step (validation or a checkpoint ran inside it) is charged its own time only."""
        extra = own
        if not tainted and self._baseline:
            extra += max(0.0, (seconds - own) - statistics.median(self._baseline))
        self.window_cost += extra
        self.total_cost += extra

    def tail_step(self) -> bool:
        """Count a step of the tail after a window; True when the tail is over."""
        self._tail_left = max(0, self._tail_left - 1)
        return self._tail_left == 0

    def defer_steps(self, elapsed: float) -> int:
        """Steps the next window must wait, ``elapsed`` seconds into the run, to keep within the budget."""
        if self.max_overhead is None or not self._baseline:
            return 0
        needed = (self.total_cost + self.window_cost) / self.max_overhead - elapsed
        return math.ceil(needed / statistics.median(self._baseline)) if needed > 0 else 0
