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
    """The chosen pipelined way ran slower in steady state (``watched_ms`` over ``watch`` training steps) than
    serial's trials, and serial, timed again beside it in paired trials (``serial_ms`` against ``way_ms``), was
    not clearly slower: serial took over."""

    way: Way
    watched_ms: float
    way_ms: float
    serial_ms: float


@dataclass
class Span:
    """A timed span of steps from a synchronised clock reading, less the steps left out (their unsynchronised
    intervals)."""

    t0: float = 0.0
    wait0: float = 0.0
    timed: int = 0
    left_out: int = 0
    skipped_s: float = 0.0
    skipped_wait: float = 0.0

    def add(self, left_out: bool, interval: float, waited: float) -> None:
        if left_out:
            self.left_out += 1
            self.skipped_s += interval
            self.skipped_wait += waited
        else:
            self.timed += 1

    def per_step(self, now: float, wait: float) -> tuple[float, float]:
        """ms per timed step and ms waited per timed step (every step, if all were left out)."""
        if self.timed == 0:
            steps = max(1, self.left_out)
            return (now - self.t0) * 1e3 / steps, (wait - self.wait0) * 1e3 / steps
        return ((now - self.t0 - self.skipped_s) * 1e3 / self.timed,
                (wait - self.wait0 - self.skipped_wait) * 1e3 / self.timed)


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

    While a pipelined way runs, its steady state is timed every ``watch`` training steps; a window slower than
    serial's mean trial by more than ``margin`` is a suspicion, not evidence: a round of paired trials (the
    choice and serial, timed alike) follows at once, and serial takes over (a :class:`Revert`) only if those
    trials no longer find the choice clearly faster.

    Only training is timed: a step the caller marks with :meth:`exclude` (a profiler window, validation, a
    checkpoint, an epoch's end), and the step after it, are left out of trials and of the steady-state watch, and
    a trial runs one step longer for each (up to twice its length).

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
        self._exclude = 0  # intervals still to leave out (the marked step and the one after it)
        self._mark = self._wait_mark = 0.0  # clock and loader wait at the last step (unsynchronised)
        self._span = Span()  # the trial's or the watch window's timed span
        self._clocked = False  # whether the trial's timed span has started
        self._extended = 0  # steps added to the current trial for the steps left out
        self._suspect: tuple[Way, float] | None = None  # the steady-state window that asked for paired trials
        self._watch_left = 0

    @property
    def pipelined(self) -> bool:
        return self.choice != SERIAL

    @property
    def in_trials(self) -> bool:
        return self._phase >= 0

    def waited(self, seconds: float) -> None:
        """The loop waited ``seconds`` for the loader in this step."""
        self._wait += seconds

    def exclude(self) -> None:
        """The step now running is not training alone: leave it (and the step after it) out of the timings."""
        self._exclude = 2

    def step(self) -> Way:
        """Call once per training batch; returns the way for this batch's successor."""
        now, wait = self.clock(), self._wait
        interval, waited = now - self._mark, wait - self._wait_mark
        self._mark, self._wait_mark = now, wait
        left_out = self._exclude > 0
        self._exclude = max(0, self._exclude - 1)
        self._left -= 1
        if self._phase >= 0:
            self._trial_step(left_out, interval, waited)
        elif self.choice != SERIAL:
            self._watch_step(left_out, interval)
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

    def _trial_step(self, left_out: bool, interval: float, waited: float) -> None:
        if not self._clocked:
            if self.trial - self._left >= self.settle:
                self._start_clock()
            return
        span = self._span
        span.add(left_out, interval, waited)
        if left_out and self._extended < self.trial:
            self._extended += 1
            self._left += 1  # the trial still times ``trial - settle`` training steps
        elif span.timed == self.abort_after and self._left > 0 and self._best_ms() is not None:
            ms, wait = self._elapsed_ms()
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
        self._span = Span(self.clock(), self._wait)
        self._clocked = True

    def _elapsed_ms(self) -> tuple[float, float]:
        """Mean ms per training step and ms waited for the loader per step since the trial's clock started."""
        self.sync()
        ms, wait = self._span.per_step(self.clock(), self._wait)
        return tuple(self.reduce([ms, wait]))  # type: ignore[return-value]

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
        self._clocked, self._extended = False, 0
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
        suspect, self._suspect = self._suspect, None
        if suspect is not None and choice == SERIAL and suspect[0] in ms:
            self.reverts.append(Revert(suspect[0], suspect[1], ms[suspect[0]], ms[SERIAL]))
            confirmed = False
        self._settle_choice(choice, confirmed)

    def _settle_choice(self, choice: Way, confirmed: bool) -> None:
        self._reverts_seen = len(self.reverts)
        self.interval = min(2 * self.interval, self.max_recheck) if confirmed else self.recheck
        self._phase, self.choice, self._left = -1, choice, self.interval
        self._watch_left = self.settle  # the first window starts after the switch has settled
        self._clocked = False

    # ------------------------------------------------------------------ steady state

    def _watch_step(self, left_out: bool, interval: float) -> None:
        if self._watch_left > 0:
            self._watch_left -= 1
            return
        if not self._clocked:
            self.sync()
            self._span = Span(self.clock(), self._wait)
            self._clocked = True
            return
        self._span.add(left_out, interval, 0.0)
        if self._span.timed < self.watch:
            return
        self.sync()
        steady = self.reduce([self._span.per_step(self.clock(), self._wait)[0]])[0]
        self._clocked = False
        if steady > self.history[-1].serial_ms * (1 + self.margin):
            self._suspect = (self.choice, steady)
            self._left = 0  # paired trials now: the choice and serial, timed alike
