"""What StreamProfiler's hooks on Lightning's actions cost every step, windows or not.

Lightning calls a profiler's ``start`` and ``stop`` around each of its actions (some 36 per training step); with no
profiler they are no-ops. Ours do a dict lookup for most actions and a few comparisons for the others. Step
:data:`FIRST_SAMPLE`, then one step in :data:`SAMPLE_EVERY`, outside the windows and their exports (a sample due in
one waits for the first step after it), has its hooks timed call by call: the profiler swaps timed versions in for
that step only, so that the other steps pay nothing for the measure. Each timed call is counted less what a
no-op call timed the same way takes (calibrated at setup), which is what the same call costs without a profiler,
and each action's scope less what it saves against Lightning's own scope (``savings``, calibrated at setup by
:func:`~lightning_streamprof.profiling.action_scope.scope_savings`): a step can cost less than with no profiler.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: one training step in this many has its hooks timed (prime, so that no loop's period lines up with it)
SAMPLE_EVERY = 97
#: the first step timed: early, so that a short run states the figure too, and past the first steps' start-up
FIRST_SAMPLE = 12
#: calls timed to calibrate the no-op baseline (about a millisecond at setup)
CALIBRATION_CALLS = 2000
#: sampled steps kept for the median (the latest)
KEEP_SAMPLES = 256


def _noop(_action: str) -> None:
    return None


def timed_call_floor(clock: Callable[[], float] = time.perf_counter, calls: int = CALIBRATION_CALLS) -> float:
    """Seconds that timing one call of a no-op takes: two clock readings and the call (the best of 3 rounds)."""
    best = float("inf")
    for _ in range(3):
        total = 0.0
        for _ in range(calls):
            t = clock()
            _noop("")
            total += clock() - t
        best = min(best, total / calls)
    return best


@dataclass
class HookTime:
    """The hooks' time per step beyond no profiler's, from sampled steps, and the steps it applies to."""

    floor: float = 0.0  # seconds per timed call that a no-op call also takes (:func:`timed_call_floor`)
    savings: dict[type, float] = field(default_factory=dict)  # seconds saved per action, by the scope's type
    clock: Callable[[], float] = time.perf_counter
    steps: int = 0
    samples: list[float] = field(default_factory=list)
    timing: bool = False  # the current step's hooks are being timed
    _seconds: float = 0.0
    _calls: int = 0
    _saved: float = 0.0  # the sampled step's scopes' savings so far
    _closing: bool = False  # the boundary call now running ended a sample: its own time joins that sample
    _due: int = FIRST_SAMPLE  # the step at which the next sample is due
    _drop_call: bool = False  # the boundary call now running spoiled its sample: its time is dropped too

    def step_boundary(self, watching: bool, spoiled: bool = False) -> bool:
        """A training step starts (``watching``: inside a window or its export); returns whether its hooks are
        to be timed. The step that ended, if timed, becomes a sample, unless its boundary call did a window's work
        (``spoiled``: it logged a window's results), in which case the next step is timed instead."""
        if self.timing and spoiled:
            self._due, self._drop_call = self.steps + 1, True
        elif self.timing:
            self.samples.append(max(0.0, self._seconds - self._calls * self.floor) - self._saved)
            del self.samples[:-KEEP_SAMPLES]
            self._closing = True
        self.steps += 1
        self.timing = not watching and self.steps >= self._due
        if self.timing:
            self._due = self.steps + SAMPLE_EVERY
        self._seconds, self._calls, self._saved = 0.0, 0, 0.0
        return self.timing

    def scoped(self, fn: Callable[[str], Any], action: str) -> Any:
        """``fn(action)``, an action's scope, its saving against Lightning's scope counted to the current step."""
        scope = fn(action)
        self._saved += self.savings.get(type(scope), 0.0)
        return scope

    def timed(self, fn: Callable[[str], None], action: str) -> None:
        """Call ``fn(action)`` and add its time to the current step's."""
        t = self.clock()
        try:
            fn(action)
        finally:
            seconds = self.clock() - t
            if self._closing:  # the step's boundary, which ends it, counts to it
                self._closing = False
                self.samples[-1] += max(0.0, seconds - self.floor)
            elif self._drop_call:
                self._drop_call = False
            else:
                self._seconds += seconds
                self._calls += 1

    @property
    def per_step(self) -> float | None:
        """Median seconds per step in the hooks beyond no profiler's, negative where they cost less (None before a
        sample)."""
        return statistics.median(self.samples) if self.samples else None

    @property
    def seconds(self) -> float:
        """The hooks' extra seconds over every step so far."""
        per_step = self.per_step
        return per_step * self.steps if per_step is not None else 0.0
