"""Where the profiling windows fall in a run (:class:`WindowSchedule`, step numbers only) and how far the
overhead budget moves them (:class:`OverheadBudget`, timings only); no torch."""

from __future__ import annotations

import enum
import math
import statistics
from collections import deque
from dataclasses import dataclass

from lightning_streamprof.profiling.argument_checks import check_int

#: the schedule's defaults (StreamProfiler's too)
SKIP_FIRST = 20
WARMUP = 2
ACTIVE = 3
#: the smallest value of each schedule argument
MINIMUMS = {"skip_first": 0, "warmup": 0, "active": 1, "every": 0, "repeat": 0}
#: steps after a window that are charged to it at least (its export's first steps): also the least gap between
#: windows in the grid that the budget places (``StreamProfiler(every=None)``)
TAIL_STEPS = 2
#: a step's excess is charged at most this many times the median excess of its window's steps
CAP_FACTOR = 3.0
#: the share of ``max_overhead`` that the budget plans windows for (the rest is a margin)
PLAN_SHARE = 0.75
#: the most steps a window waits past the step the schedule placed it on while a staging callback has not made its
#: first choice of way (StreamPipeline's ``auto``: its warm-up and first trials, which on CUDA end after about 10 + 130
#: to 400 steps), so that the window records the way the run settles on; a window still waiting then records anyway,
#: and its note says it recorded before the choice
CHOICE_WAIT = 500


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

    skip_first: int = SKIP_FIRST
    warmup: int = WARMUP
    active: int = ACTIVE
    every: int = 0
    repeat: int = 0

    def __post_init__(self) -> None:
        for name, minimum in MINIMUMS.items():
            check_int("WindowSchedule", name, getattr(self, name), minimum)
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


class StepBaseline:
    """The last ``size`` unprofiled step times: a robust location (their mean with each value clamped to the median
    +- 4 spreads) and spread (1.4826 x the median absolute deviation, at least 1% of the median)."""

    def __init__(self, size: int = 64) -> None:
        self._steps: deque[float] = deque(maxlen=size)
        self._stats: tuple[float, float] | None = None

    def add(self, seconds: float) -> None:
        self._steps.append(seconds)
        self._stats = None

    def __bool__(self) -> bool:
        return bool(self._steps)

    @property
    def stats(self) -> tuple[float, float]:
        """``(location, spread)`` in seconds."""
        if self._stats is None:
            med = statistics.median(self._steps)
            spread = max(1.4826 * statistics.median(abs(x - med) for x in self._steps), 0.01 * med)
            lo, hi = med - 4 * spread, med + 4 * spread
            self._stats = (statistics.fmean(min(max(x, lo), hi) for x in self._steps), spread)
        return self._stats


class OverheadBudget:
    """The profiler's measured cost against a share of training time.

    Each window opens a charge period that lasts until its trace is exported and analysed (at least
    ``min_tail_steps`` steps after the window). Every step of the period is charged the profiler's own time in the
    training thread plus the step's excess over the unprofiled baseline (:class:`StepBaseline`), and a period is
    charged at least its own time. A step's excess is capped at ``cap_factor`` times the median excess of the
    window's steps (at least 4 baseline spreads): a step slowed by something else (a stalled fetch, a slow file
    system) is charged as a typical step of the window, and its stall is not the profiler's. A step in which
    validation or a checkpoint ran (``tainted``) is charged its own time only.

    :meth:`defer_steps` says how many steps the next window must wait so that the cost of all windows, the next one
    included, stays within ``plan_share`` of ``max_overhead`` of the training time: the next window is expected to
    cost what earlier windows cost on average, and a period still open counts with its cost so far plus the rest of
    an average export. The margin (the rest of the budget) is for what a window's cost varies by, so that
    the cost that a whole run measures stays under ``max_overhead`` rather than on it.
    """

    def __init__(self, max_overhead: float | None, baseline_steps: int = 64, cap_factor: float = CAP_FACTOR,
                 min_tail_steps: int = TAIL_STEPS, plan_share: float = PLAN_SHARE) -> None:
        self.max_overhead = max_overhead
        self.plan_share = plan_share
        self.cap_factor = cap_factor
        self.min_tail_steps = min_tail_steps
        self.baseline = StepBaseline(baseline_steps)
        self.windows = 0
        self._settled = 0.0
        self._open = False
        self._own = 0.0
        self._excess = 0.0  # the open period's capped excess (signed: noise cancels out)
        self._window_x: list[float] = []  # the open window's uncapped excesses, capped when it ends
        self._cap = math.inf
        self._tail = 0.0
        self._tail_steps = 0
        self._tail_costs: list[float] = []
        self._period_costs: list[float] = []
        self._window_own = 0.0  # the open period's own time during its window's steps (Kineto's set-up, start, stop)
        self._window_excess = 0.0
        self._first_parts: dict[str, float] | None = None

    # ------------------------------------------------------------------ steps
    def unprofiled_step(self, seconds: float) -> None:
        """A step outside windows and their exports: part of the baseline."""
        self.baseline.add(seconds)

    def begin_window(self) -> None:
        """A window's first step comes next (the period of an earlier window's export, if still open, goes on)."""
        self._open = True
        self._window_x = []

    def window_step(self, seconds: float, own: float, tainted: bool = False) -> None:
        """A warm-up or recorded step of ``seconds``, ``own`` of them in the profiler itself."""
        self._own += own
        if not tainted and self.baseline:
            self._window_x.append(seconds - own - self.baseline.stats[0])

    def end_window(self) -> None:
        """The window's steps are over: their excesses are capped and charged; the export's steps come next."""
        self._cap = self._window_cap()
        excess = sum(self._capped(x) for x in self._window_x)
        self._excess += excess
        self._window_excess += excess
        self._window_own = self._own
        self._window_x = []
        self._tail, self._tail_steps = 0.0, 0
        self.windows += 1

    def tail_step(self, seconds: float, own: float, tainted: bool = False) -> None:
        """A step while a window's trace is exported or analysed (the first one's ``own`` includes ending the window)."""
        self._own += own
        if self._tail_steps == 0:
            self._window_own += own
        self._tail_steps += 1
        if not tainted and self.baseline:
            x = self._capped(seconds - own - self.baseline.stats[0])
            self._excess += x
            self._tail += x

    @property
    def tail_done(self) -> bool:
        """At least ``min_tail_steps`` steps were charged since the window ended."""
        return self._tail_steps >= self.min_tail_steps

    def end_period(self) -> None:
        """Exports are done: the period's cost is settled."""
        if not self._open:
            return
        cost = self._own + max(0.0, self._excess)
        self._settled += cost
        if not self._period_costs:
            self._first_parts = {"profiler": self._window_own, "steps": self._window_excess,
                                 "export": cost - self._window_own - self._window_excess}
        self._period_costs.append(cost)
        self._tail_costs.append(self._tail)
        self._open, self._own, self._excess, self._tail, self._tail_steps = False, 0.0, 0.0, 0.0, 0
        self._window_own = self._window_excess = 0.0

    def _window_cap(self) -> float:
        """``cap_factor`` x the median excess of the open window's steps, at least 4 baseline spreads."""
        spread = self.baseline.stats[1] if self.baseline else 0.0
        typical = max(0.0, statistics.median(self._window_x)) if self._window_x else 0.0
        return max(self.cap_factor * typical, 4 * spread)

    def _capped(self, x: float, cap: float | None = None) -> float:
        cap = self._cap if cap is None else cap
        return min(max(x, -cap), cap)

    # ------------------------------------------------------------------ totals
    @property
    def total_cost(self) -> float:
        """Seconds of training time the profiler cost so far (an open period with its cost so far)."""
        cap = self._window_cap() if self._window_x else 0.0
        pending = sum(self._capped(x, cap) for x in self._window_x)
        return self._settled + self._own + max(0.0, self._excess + pending)

    @property
    def first_window_cost(self) -> float | None:
        """Seconds the first window cost, once its export is done."""
        return self._period_costs[0] if self._period_costs else None

    @property
    def first_window_parts(self) -> dict[str, float] | None:
        """Where the first window's cost went, once settled (seconds, summing to :attr:`first_window_cost`):
        ``profiler``, its own time in the training thread during the window (Kineto's set-up, start and stop);
        ``steps``, the slowdown of its warm-up and recorded steps; ``export``, the rest: the steps while its trace
        was saved, analysed and written, and the profiler's time in them."""
        return dict(self._first_parts) if self._first_parts is not None else None

    def fraction(self, elapsed: float) -> float:
        """The cost as a share of ``elapsed`` seconds of training."""
        return self.total_cost / elapsed if elapsed > 0 else 0.0

    def defer_steps(self, elapsed: float) -> int:
        """Steps the next window must wait, ``elapsed`` seconds into the run, to keep within the budget."""
        if self.max_overhead is None or not self.baseline:
            return 0
        cost = self.total_cost
        if self._open and self._tail_costs:  # the rest of the open export, as earlier exports cost
            cost += max(0.0, statistics.fmean(self._tail_costs) - self._tail)
        if self._period_costs:  # the next window itself, as earlier windows cost
            cost += statistics.fmean(self._period_costs)
        needed = cost / (self.max_overhead * self.plan_share) - elapsed
        return math.ceil(needed / self.baseline.stats[0]) if needed > 0 else 0
