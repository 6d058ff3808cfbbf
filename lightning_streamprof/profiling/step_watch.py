"""The step-time watch: a slowdown that stays is caught as it happens, and single stalls are listed.

The recorder hands it each step's time from the clock read it makes anyway (:meth:`StepWatch.add`: a few attribute
reads and an append per step); steps in a window or its export, steps in which validation, a checkpoint or an epoch's
start ran (``tainted``) and the steps of StreamPipeline's trials are left out. Every :data:`CHECK_EVERY` steps it
takes the median of the last ``steps`` steps. Each full block of steps that is not slow adds its median and median
absolute deviation to the run's baseline (the median of the latest :data:`BLOCKS` medians, at least
:data:`BASELINE_BLOCKS` of them). The watch fires when the recent median is at least ``factor`` times the baseline and
further above it than :data:`Z` standard errors of a median of ``steps`` steps (from the baseline's spread), so the
step-to-step noise of a run does not fire it. Once fired it waits until the run is normal again (the recent median
below a quarter of the factor's rise) or slower by ``factor`` once more. A step of at least ``stall_factor`` times the
baseline is a stall.

The defaults, measured (``benchmarks/step_watch.py``, ``benchmarks/results/step-watch/``): no window in 200 simulated
runs of 10,000 steps without a slowdown (lognormal noise up to sigma 25% with hiccups, a host drifting +-10%,
correlated noise); a 1.5x slowdown caught 25 to 50 steps after it starts, one of 1.25x (the threshold itself) after
a median of 60 to 150 steps; about 0.3 us a step on a small CPU.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lightning_streamprof.profiling.loop_time import CHECKPOINT, TRAINING_EPOCH, VALIDATION_START
from lightning_streamprof.profiling.pipeline_view import timing_ways
from lightning_streamprof.results.triggers import REFERENCE, SLOWDOWN, Stall, WindowTrigger

#: defaults, and the steps between two looks at the recent median
FACTOR = 1.25
STEPS = 50
STALL_FACTOR = 10.0
#: a look sorts the recent steps (about 3 us on a small CPU): every 25 steps keeps the watch near 0.3 us a step
CHECK_EVERY = 25
#: the fewest recent steps a median is taken of
MIN_STEPS = 10
#: the first steps the watch leaves out (compilation, caches warming up; fewer with a smaller ``skip_first``)
SKIP = 20
#: blocks of ``steps`` normal steps the baseline needs, and the most it is the median of
BASELINE_BLOCKS = 2
BLOCKS = 256
#: the rise must be this many standard errors of the recent median (a median of n steps: 1.2533 sigma / sqrt(n))
Z = 4.0
#: stalls listed (the first ones; the rest are counted)
MAX_STALLS = 50


def taints(action: str) -> bool:
    """Whether ``action`` (one that reaches the stage outside a window) makes its step no plain training step."""
    return action == CHECKPOINT or action == TRAINING_EPOCH or action.endswith(VALIDATION_START)


def attach_watch(settings: Any, recorder: Any, pipelines: Callable[[], Sequence[Any]], fit: bool, rank: int,
                 world_size: int, offer: Callable[[Any], bool] | None) -> tuple[StepWatch | None, str | None]:
    """The watch of a fit's ``recorder`` (set as its ``watch``), or None and the line that says why there is none. In a
    multi-rank run it watches rank 0 (whose steps wait for the slowest rank's) and ``offer`` hands what it finds to
    the ranks' agreement on requests."""
    if settings.watch is None or not fit or rank != 0:
        return None, None
    if world_size > 1 and offer is None:
        return None, ("the step-time watch is off in this multi-rank run: the ranks agree on its windows through the "
                      "requests' exchange, which needs on_request=True and analyze=True")
    fire = recorder.request_window if world_size == 1 else offer
    watch = StepWatch(settings.watch, fire, busy=lambda: timing_ways(pipelines()),
                      offset=lambda: recorder.offset, skip=min(settings.schedule.skip_first, SKIP))
    recorder.watch = watch
    return watch, None


@dataclass(frozen=True)
class WatchSettings:
    """``factor``: the recent median over the baseline that fires the watch; ``steps``: the recent steps whose median
    is watched; ``stall_factor``: a step this many times the baseline is a stall."""

    factor: float = FACTOR
    steps: int = STEPS
    stall_factor: float = STALL_FACTOR


class StepWatch:
    """Watches clean step times (:meth:`add`) and calls ``fire(trigger)`` when the run slows down and stays slow;
    ``busy()`` says whether a staging callback is timing ways or choosing one (those steps are left out), ``offset()``
    gives the global index of the run's first step. ``fire`` returns whether a window was placed."""

    def __init__(self, settings: WatchSettings, fire: Callable[[WindowTrigger], bool],
                 busy: Callable[[], bool] = lambda: False, offset: Callable[[], int] = lambda: 0,
                 skip: int = 0) -> None:
        self.settings = settings
        self._fire, self._busy, self._offset = fire, busy, offset
        self._skip = skip
        self._times: deque[float] = deque(maxlen=settings.steps)  # the recent steps' seconds
        self._steps: deque[int] = deque(maxlen=settings.steps)  # and their indices
        #: (median, MAD) of the latest normal blocks: the baseline of the last BLOCKS x steps normal steps
        self._blocks: deque[tuple[float, float]] = deque(maxlen=BLOCKS)
        self._fresh = 0  # steps added since the last block was taken
        self._taken = 0  # blocks taken
        self._count = 0  # steps added since the last look
        self._stall_at = math.inf
        self.baseline: float | None = None  # seconds
        self._spread = 0.0
        self._armed = True
        self._level = math.inf  # the slowest recent median since the watch last fired
        self.tainted = False  # set by the stage: validation, a checkpoint or an epoch's start ran in this step
        self.stalls: list[Stall] = []
        self.more_stalls = 0
        self.triggers: list[WindowTrigger] = []

    def add(self, seconds: float, step: int) -> None:
        """A step outside the profiler's windows took ``seconds`` (``step``: run-relative)."""
        if self.tainted or step < self._skip:
            self.tainted = False
            return
        if seconds >= self._stall_at:
            self._stall(step, seconds)
        self._times.append(seconds)
        self._steps.append(step)
        self._count += 1
        if self._count >= CHECK_EVERY:
            self._look()

    def _stall(self, step: int, seconds: float) -> None:
        if len(self.stalls) < MAX_STALLS:
            self.stalls.append(Stall(step=self._offset() + step, ms=seconds * 1e3, median_ms=self.baseline * 1e3))
        else:
            self.more_stalls += 1

    def _look(self) -> None:
        """The recent median against the baseline, every :data:`CHECK_EVERY` steps."""
        n = self.settings.steps
        self._fresh += self._count
        self._count = 0
        if self._trials():  # a staging callback's trials: their steps say nothing of the run
            self._times.clear()
            self._steps.clear()
            self._fresh = 0
            return
        if len(self._times) < n:
            return
        times = sorted(self._times)
        median = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
        base = self.baseline
        if base is None or self._normal(median):
            if self._fresh >= n:
                self._fresh = 0
                self._blocks.append((median, sorted([abs(t - median) for t in times])[n // 2]))
                self._rebase()
            if base is not None and median < base * (1 + (self.settings.factor - 1) / 4):
                self._armed, self._level = True, math.inf
            return
        if self._slow(median):
            onset, since = self._onset(base, median)
            trigger = WindowTrigger(reason=SLOWDOWN, step=self._offset() + onset, baseline_ms=base * 1e3,
                                    recent_ms=since * 1e3)
            if self._fire(trigger):
                self.triggers.append(trigger)
                self._armed, self._level = False, max(since, self.settings.factor * base)
        elif median > self._level:  # the slowdown fired for settles higher as the recent steps fill with it
            self._level = median

    def _trials(self) -> bool:
        """Whether a staging callback is timing or choosing ways (a state that cannot be read counts as that)."""
        try:
            return bool(self._busy())
        except Exception:  # noqa: BLE001 - a callback's state is a courtesy
            return True

    def _normal(self, median: float) -> bool:
        """Not enough above the baseline to be a slowdown."""
        base = self.baseline
        rise = median - base
        return median < self.settings.factor * base or rise < Z * 1.2533 * self._spread / math.sqrt(self.settings.steps)

    def _slow(self, median: float) -> bool:
        """A slowdown the watch has not fired for yet: the first since the run was normal, or a further one."""
        return self._armed or median >= self.settings.factor * self._level

    def _rebase(self) -> None:
        """The baseline from the normal blocks so far; the first time it is known, a reference window is asked."""
        self._taken += 1
        taken = self._taken
        if taken < BASELINE_BLOCKS or (taken > 16 and taken % 16):  # later blocks move it little: every 16th
            return
        first = self.baseline is None
        self.baseline = statistics.median(m for m, _ in self._blocks)
        self._spread = max(1.4826 * statistics.median(d for _, d in self._blocks), 0.01 * self.baseline)
        self._stall_at = self.settings.stall_factor * self.baseline
        if first:
            self._fire(WindowTrigger(reason=REFERENCE, baseline_ms=self.baseline * 1e3))

    def _onset(self, base: float, median: float) -> tuple[int, float]:
        """The recent step the slowdown started at (run-relative: the split with the most fast steps before it and
        slow steps from it on, a step being slow above the middle of the baseline and the recent ``median``) and the
        median of the steps from it on."""
        limit = 0.5 * (base + median)
        steps = list(zip(self._steps, self._times))
        slow = [seconds >= limit for _, seconds in steps]
        score = best = sum(slow)  # split before the first step: every slow step counts
        split = 0
        for i, is_slow in enumerate(slow, 1):
            score += -1 if is_slow else 1
            if score > best:
                best, split = score, i
        split = min(split, len(steps) - 1)
        return steps[split][0], statistics.median(seconds for _, seconds in steps[split:])
