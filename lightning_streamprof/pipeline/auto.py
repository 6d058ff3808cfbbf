"""``mode="auto"``: time serial and pipelined steps, keep the fastest, check again now and then."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

SERIAL = "serial"
SETTLE = 3  # untimed steps at the start of each trial (the switch itself costs a step)


def check_trial(trial: int, settle: int = SETTLE) -> None:
    """A trial must time at least one step after its untimed start."""
    if trial <= settle:
        raise ValueError(f"StreamPipeline: `trial` must be more than {settle} steps (the untimed start), got {trial}")


@dataclass(frozen=True)
class Measurement:
    """Mean ms per step of each candidate in one round of trials, each trial's ms per step, and the choice."""

    ms: dict[str, float]
    choice: str
    trials: dict[str, list[float]] = field(default_factory=dict)

    def worst_gain(self, candidate: str) -> float:
        """The candidate's gain over serial from its slowest trial against serial's fastest."""
        if not self.trials:
            return self.serial_ms / self.ms[candidate] - 1.0
        return min(self.trials[SERIAL]) / max(self.trials[candidate]) - 1.0

    @property
    def serial_ms(self) -> float:
        return self.ms[SERIAL]

    @property
    def best(self) -> str:
        """The fastest pipelined candidate."""
        return min((c for c in self.ms if c != SERIAL), key=self.ms.__getitem__)

    @property
    def pipelined_ms(self) -> float:
        return self.ms[self.best]

    @property
    def gain(self) -> float:
        """The fastest pipelined candidate's throughput over serial throughput, minus one."""
        return self.serial_ms / self.pipelined_ms - 1.0


@dataclass(frozen=True)
class Revert:
    """The chosen pipelined way ran slower than serial's trials in steady state, so serial took over."""

    way: str
    steady_ms: float
    serial_ms: float


class AutoSwitch:
    """Trials of ``trial`` steps per candidate, in turn and twice (serial, then each pipelined way, then
    again, so that drift in the loader or the machine cancels out); then the fastest runs for ``recheck``
    steps. Each round of trials that confirms the previous choice doubles the steps until the next round, up
    to ``max_recheck`` (default 8 x ``recheck``), so that a stable run spends ever less time in trials of
    slower ways; a changed choice or a revert starts again from ``recheck``.

    A pipelined candidate is kept only when every one of its trials is faster than every serial trial by more
    than ``margin`` (a gain smaller than the trials' own spread is noise); of those, the fastest on average
    wins. Each trial's
    first ``settle`` steps are not timed (the switch itself costs a step). ``sync`` waits for the device at
    trial edges.

    While a pipelined way runs, its steady state is timed every ``watch`` steps (one ``sync`` per window);
    a window slower than serial's mean trial time by more than ``margin`` switches to serial until the next
    round of trials, so a misjudged trial cannot keep training slower than serial for long.

    ``reduce`` averages timings across processes (DDP ranks; every rank calls it at the same steps) so that
    all ranks decide alike from the same numbers.
    """

    def __init__(
        self, candidates: Sequence[str] = (SERIAL, "pipelined"), warmup: int = 20, trial: int = 30,
        recheck: int = 1000, margin: float = 0.02, settle: int = SETTLE, rounds: int = 2, watch: int = 200,
        sync: Callable[[], None] = lambda: None, max_recheck: int | None = None,
        reduce: Callable[[list[float]], list[float]] = lambda values: values,
    ) -> None:
        if not candidates or candidates[0] != SERIAL or len(candidates) < 2:
            raise ValueError(f"AutoSwitch: candidates must start with {SERIAL!r} and name a pipelined way")
        check_trial(trial, settle)
        self.candidates = tuple(candidates)
        self.warmup, self.trial, self.recheck, self.margin, self.settle = warmup, trial, recheck, margin, settle
        self.max_recheck = 8 * recheck if max_recheck is None else max(max_recheck, recheck)
        self.interval = recheck  # steps from the last decision to the next round of trials
        self._reverts_seen = 0
        self.sync = sync
        self.reduce = reduce
        self.rounds = rounds
        self.order = self.candidates * rounds
        self.choice = SERIAL
        self.history: list[Measurement] = []
        self.reverts: list[Revert] = []
        self.watch = watch
        self._watch_left = 0
        self._w0 = 0.0
        self._phase = -1  # -1: warm-up or running the choice; else the index into ``order``
        self._left = warmup
        self._t0 = 0.0
        self._times: dict[str, list[float]] = {}

    @property
    def pipelined(self) -> bool:
        return self.choice != SERIAL

    def drop(self, candidate: str) -> None:
        """Stop trying a pipelined ``candidate`` (takes effect from the next round of trials; serial and one
        pipelined way always stay)."""
        if candidate in self.candidates[1:] and len(self.candidates) > 2 and self._phase < 0:
            self.candidates = tuple(c for c in self.candidates if c != candidate)
            self.order = self.candidates * self.rounds

    def step(self) -> str:
        """Call once per training batch; returns the candidate to use for this batch's successor."""
        self._left -= 1
        if self._phase >= 0 and self._left == self.trial - self.settle:
            self.sync()
            self._t0 = time.perf_counter()
        elif self._phase < 0 and self.choice != SERIAL:
            self._watch_step()
        if self._left > 0:
            return self.choice
        if self._phase < 0:
            self._times = {c: [] for c in self.candidates}
            self._enter(0)
        else:
            self._times[self.order[self._phase]].append(self._elapsed_ms())
            if self._phase + 1 < len(self.order):
                self._enter(self._phase + 1)
            else:
                self._decide()
        return self.choice

    def _decide(self) -> None:
        flat = self.reduce([t for c in self.candidates for t in self._times[c]])
        self._times = {c: flat[i * self.rounds:(i + 1) * self.rounds] for i, c in enumerate(self.candidates)}
        ms = {c: sum(t) / len(t) for c, t in self._times.items()}
        m = Measurement(ms, SERIAL, {c: list(t) for c, t in self._times.items()})
        clear = [c for c in self.candidates[1:] if m.worst_gain(c) > self.margin]
        choice = min(clear, key=ms.__getitem__) if clear else SERIAL
        confirmed = bool(self.history) and self.history[-1].choice == choice and len(self.reverts) == self._reverts_seen
        self.history.append(replace(m, choice=choice))
        self._reverts_seen = len(self.reverts)
        self.interval = min(2 * self.interval, self.max_recheck) if confirmed else self.recheck
        self._phase, self.choice, self._left = -1, choice, self.interval
        self._watch_left = self.watch + self.settle  # the first window starts after the switch has settled

    def _watch_step(self) -> None:
        self._watch_left -= 1
        if self._watch_left == self.watch:
            self.sync()
            self._w0 = time.perf_counter()
        elif self._watch_left == 0:
            self.sync()
            now = time.perf_counter()
            steady = self.reduce([(now - self._w0) * 1e3 / self.watch])[0]
            serial = self.history[-1].serial_ms
            if steady > serial * (1 + self.margin):
                self.reverts.append(Revert(self.choice, steady, serial))
                self.choice = SERIAL
                self._left = min(self._left, self.recheck)  # trials again soon
            self._w0, self._watch_left = now, self.watch

    def _elapsed_ms(self) -> float:
        self.sync()
        return (time.perf_counter() - self._t0) * 1e3 / (self.trial - self.settle)

    def _enter(self, phase: int) -> None:
        self._phase, self.choice, self._left = phase, self.order[phase], self.trial
