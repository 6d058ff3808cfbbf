"""``mode="auto"``: time serial and pipelined steps, keep the fastest, check again now and then."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from lightning_streamprof.pipeline.way import SERIAL, Way

SETTLE = 3  # untimed steps at the start of each trial (the switch itself costs a step)


def check_trial(trial: int, settle: int = SETTLE) -> None:
    """A trial must time at least one step after its untimed start."""
    if isinstance(trial, bool) or not isinstance(trial, int) or trial <= settle:
        raise ValueError(f"StreamPipeline: `trial` must be more than {settle} steps (the untimed start), got {trial!r}")


@dataclass(frozen=True)
class Measurement:
    """Mean ms per step of each way in one round of trials, each trial's ms per step, the ways whose trial was
    cut short (clearly slower than the best so far), the ms per step serial waited for the loader, and the
    choice."""

    ms: dict[Way, float]
    choice: Way
    trials: dict[Way, list[float]] = field(default_factory=dict)
    clear_losers: tuple[Way, ...] = ()
    serial_wait_ms: float = 0.0

    def worst_gain(self, way: Way) -> float:
        """The way's gain over serial from its slowest trial against serial's fastest."""
        if not self.trials:
            return self.serial_ms / self.ms[way] - 1.0
        return min(self.trials[SERIAL]) / max(self.trials[way]) - 1.0

    def clearly_faster(self, way: Way, margin: float) -> bool:
        """Faster than serial on average by more than ``margin``, and in every trial."""
        return self.serial_ms / self.ms[way] - 1.0 > margin and self.worst_gain(way) > 0.0

    @property
    def serial_ms(self) -> float:
        return self.ms[SERIAL]

    @property
    def loader_share(self) -> float:
        """The share of serial's step spent waiting for the loader."""
        return self.serial_wait_ms / self.serial_ms if self.serial_ms > 0 else 0.0

    @property
    def best(self) -> Way:
        """The fastest pipelined way."""
        return min((w for w in self.ms if w != SERIAL), key=self.ms.__getitem__)

    @property
    def gain(self) -> float:
        """The fastest pipelined way's throughput over serial throughput, minus one."""
        return self.serial_ms / self.ms[self.best] - 1.0


@dataclass(frozen=True)
class Revert:
    """The chosen pipelined way ran slower than serial's trials in steady state, so serial took over."""

    way: Way
    steady_ms: float
    serial_ms: float


def trial_order(ways: Sequence[Way]) -> list[Way]:
    """The most promising pipelined way first (graphs, then the staging thread), then serial, then the rest:
    a way clearly slower than the best before it is cut short, serial too."""
    piped = sorted((w for w in ways if w != SERIAL), key=lambda w: (not w.graph, not w.thread))
    return piped[:1] + [SERIAL] + piped[1:]


class AutoSwitch:
    """Trials of ``trial`` steps per way, in turn (the most promising pipelined way, serial, then the others;
    the ways still in contention a second time, so that drift in the loader or the machine cancels out); then
    the fastest runs for ``recheck`` steps. A pipelined way is kept only when it is faster than serial on
    average by more than ``margin`` and every one of its trials is faster than every serial trial (a gain the
    trials do not agree on is noise); of those, the fastest on average wins. Each trial's first ``settle`` steps
    are not timed (the switch itself costs a step).

    Trials cost what the slower ways lose, so they are kept short: a trial whose first ``abort_after`` timed
    steps run slower than the best way so far by more than ``clear_loss`` ends there (serial's too), and a
    pipelined way cut short sits out the next 1, 3, 7, ... rounds while it keeps losing clearly. When serial
    waits for the loader more than ``loader_bound`` of its step, no way can beat the loader's pace and serial
    stays (a pipelined trial that drains the loader's queue looks faster than it can run). Each round that
    confirms the choice doubles the steps to the next (up to ``max_recheck``, default 8 x ``recheck``).

    While a pipelined way runs, its steady state is timed every ``watch`` steps; a window slower than serial's
    mean trial by more than ``margin`` hands over to serial until the next round, so that a misjudged trial
    cannot keep training slower than serial for long.

    ``clock`` gives seconds (a fake one in tests); ``sync`` waits for the device before each reading;
    :meth:`waited` is told the seconds each step waited for the loader; ``reduce`` averages timings across
    processes (DDP ranks; every rank calls it at the same steps) so that all ranks decide alike.
    """

    def __init__(
        self, ways: Sequence[Way], warmup: int = 10, trial: int = 30, recheck: int = 1000, margin: float = 0.02,
        settle: int = SETTLE, rounds: int = 2, watch: int = 200, abort_after: int = 10, clear_loss: float = 0.1,
        loader_bound: float = 0.2, sync: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.perf_counter, max_recheck: int | None = None,
        reduce: Callable[[list[float]], list[float]] = lambda values: values,
    ) -> None:
        if not ways or ways[0] != SERIAL or len(ways) < 2 or len(set(ways)) != len(ways):
            raise ValueError("AutoSwitch: ways must start with serial and name distinct pipelined ways")
        check_trial(trial, settle)
        self.ways = tuple(ways)
        self.warmup, self.trial, self.recheck, self.margin, self.settle = warmup, trial, recheck, margin, settle
        self.rounds, self.watch, self.clear_loss, self.loader_bound = rounds, watch, clear_loss, loader_bound
        self.abort_after = max(1, min(abort_after, trial - settle))
        self.max_recheck = 8 * recheck if max_recheck is None else max(max_recheck, recheck)
        self.sync, self.clock, self.reduce = sync, clock, reduce
        self.interval = recheck  # steps from the last decision to the next round of trials
        self.choice: Way = SERIAL
        self.history: list[Measurement] = []
        self.reverts: list[Revert] = []
        self.sitting_out: dict[Way, int] = {}  # rounds left to sit out, per way that lost clearly
        self._losses: dict[Way, int] = {}  # clear losses in a row, per way
        self._reverts_seen = 0
        self._order: list[Way] = []
        self._passes_left = 0
        self._phase = -1  # -1: warm-up or running the choice; else the index into ``_order``
        self._left = warmup
        self._t0 = self._wait0 = self._wait = 0.0
        self._times: dict[Way, list[float]] = {}
        self._waits: list[float] = []
        self._cut: list[Way] = []
        self._watch_left = 0
        self._w0 = 0.0

    @property
    def pipelined(self) -> bool:
        return self.choice != SERIAL

    @property
    def in_trials(self) -> bool:
        return self._phase >= 0

    def waited(self, seconds: float) -> None:
        """The loop waited ``seconds`` for the loader in this step."""
        self._wait += seconds

    def step(self) -> Way:
        """Call once per training batch; returns the way for this batch's successor."""
        self._left -= 1
        if self._phase >= 0:
            self._trial_step()
        elif self.choice != SERIAL:
            self._watch_step()
        if self._left > 0:
            return self.choice
        if self._phase < 0:
            self._start_round()
        else:
            self._end_trial(*self._elapsed_ms())
        return self.choice

    # ------------------------------------------------------------------ trials

    def _start_round(self) -> None:
        reverted = len(self.reverts) > self._reverts_seen
        if reverted:
            self.sitting_out.clear()  # conditions changed: every way may be tried again
        tried = [w for w in self.ways if not self.sitting_out.get(w)]
        self.sitting_out = {w: n - 1 for w, n in self.sitting_out.items() if n > 1}
        confirming = bool(self.history) and not reverted and self.history[-1].choice in tried
        if confirming and self.history[-1].choice != SERIAL:
            tried = [SERIAL, self.history[-1].choice]
        if len(tried) < 2:  # every pipelined way sits out: keep serial, look again later
            self._settle_choice(SERIAL, confirmed=True)
            return
        self._order = trial_order(tried)
        self._passes_left = 0 if confirming else self.rounds - 1
        self._times = {w: [] for w in tried}
        self._waits, self._cut = [], []
        self._enter(0)

    def _trial_step(self) -> None:
        done = self.trial - self._left
        if done == self.settle:
            self._start_clock()
        elif done == self.settle + self.abort_after < self.trial and self._best_ms() is not None:
            ms, wait = self._elapsed_ms(self.abort_after)
            best = self._best_ms()
            if best is not None and ms > best * (1 + self.clear_loss):
                self._cut.append(self._order[self._phase])
                self._end_trial(ms, wait)  # the trial ends at this step

    def _best_ms(self) -> float | None:
        """The fastest mean so far among the ways not cut short (``None`` before any trial ended)."""
        means = [sum(t) / len(t) for w, t in self._times.items() if t and w not in self._cut]
        return min(means) if means else None

    def _start_clock(self) -> None:
        self.sync()
        self._t0, self._wait0 = self.clock(), self._wait

    def _elapsed_ms(self, steps: int | None = None) -> tuple[float, float]:
        """Mean ms per step and ms waited for the loader per step since the trial's clock started."""
        self.sync()
        steps = self.trial - self.settle if steps is None else steps
        ms, wait = self.reduce([(self.clock() - self._t0) * 1e3 / steps, (self._wait - self._wait0) * 1e3 / steps])
        return ms, wait

    def _end_trial(self, ms: float, wait: float) -> None:
        way = self._order[self._phase]
        self._times[way].append(ms)
        if way == SERIAL:
            self._waits.append(wait)
        nxt = self._phase + 1
        if nxt == len(self._order):
            self._cut_clear_losers()
        if nxt == len(self._order) and self._passes_left > 0:
            again = [w for w in trial_order(self._times) if w not in self._cut]
            if SERIAL in again and len(again) > 1:  # still a contest: once more, to see the spread
                self._order += again
                self._passes_left -= 1
        if nxt < len(self._order):
            self._enter(nxt)
        else:
            self._decide()

    def _cut_clear_losers(self) -> None:
        """At the end of a pass, the ways clearly slower than the best count as cut short too."""
        best = self._best_ms()
        for way, times in self._times.items():
            if best is not None and times and way not in self._cut and sum(times) / len(times) > best * (1 + self.clear_loss):
                self._cut.append(way)

    def _enter(self, phase: int) -> None:
        self._phase, self.choice, self._left = phase, self._order[phase], self.trial
        if self.settle == 0:  # timed from the switch itself
            self._start_clock()

    def _decide(self) -> None:
        cut = set(self._cut)
        ms = {w: sum(t) / len(t) for w, t in self._times.items()}
        wait = sum(self._waits) / len(self._waits) if self._waits else 0.0
        m = Measurement(ms, SERIAL, {w: list(t) for w, t in self._times.items()}, tuple(self._cut), wait)
        clear = [w for w in self._times if w != SERIAL and w not in cut and m.clearly_faster(w, self.margin)]
        if m.loader_share > self.loader_bound:
            clear = []  # the loader sets the pace: no way can beat serial for long
        choice = min(clear, key=ms.__getitem__) if clear else SERIAL
        previous = self.history[-1].choice if self.history else None
        confirmed = previous == choice and len(self.reverts) == self._reverts_seen
        if not confirmed:
            self.sitting_out.clear()  # conditions changed: every way may be tried again
        for way in self._times:
            if way == SERIAL:
                continue
            self._losses[way] = self._losses.get(way, 0) + 1 if way in cut else 0
            if way in cut:  # sits out 1, 3, 7, ... rounds as it keeps losing clearly
                self.sitting_out[way] = 2 ** self._losses[way] - 1
        self.history.append(replace(m, choice=choice))
        self._settle_choice(choice, confirmed)

    def _settle_choice(self, choice: Way, confirmed: bool) -> None:
        self._reverts_seen = len(self.reverts)
        self.interval = min(2 * self.interval, self.max_recheck) if confirmed else self.recheck
        self._phase, self.choice, self._left = -1, choice, self.interval
        self._watch_left = self.watch + self.settle  # the first window starts after the switch has settled

    # ------------------------------------------------------------------ steady state

    def _watch_step(self) -> None:
        self._watch_left -= 1
        if self._watch_left == self.watch:
            self.sync()
            self._w0 = self.clock()
        elif self._watch_left == 0:
            self.sync()
            now = self.clock()
            steady = self.reduce([(now - self._w0) * 1e3 / self.watch])[0]
            serial = self.history[-1].serial_ms
            if steady > serial * (1 + self.margin):
                self.reverts.append(Revert(self.choice, steady, serial))
                self.choice = SERIAL
                self._left = min(self._left, self.recheck)  # trials again soon
            self._w0, self._watch_left = now, self.watch
