"""``mode="auto"``: time serial and pipelined steps, keep the fastest, check again now and then.

After ``warmup`` steps, each candidate way (:func:`~lightning_streamprof.pipeline.way.candidate_ways`: serial,
pipelined on the loop's thread, on the staging thread, the frozen calls as a CUDA graph) runs a trial of ``trial``
steps, the first :data:`SETTLE` untimed (the switch itself costs a step): the most promising pipelined way, serial,
then the others, and the ways still in contention a second time, so that drift in the loader or the machine cancels
out. A pipelined way is kept only when it beats serial on average by more than :data:`MARGIN` and each of its trials
beats each serial trial (a gain the trials do not agree on is noise); of those, the fastest on average wins.

Trials cost what the slower ways lose, so they are kept short: a trial whose first :data:`ABORT_AFTER` timed steps
run slower than the best way so far by more than :data:`CLEAR_LOSS` ends there (serial's too), and a pipelined way
cut short sits out the next 1, 3, 7, ... rounds while it keeps losing clearly. When serial waits for the loader more
than :data:`LOADER_BOUND` of its step, no way can beat the loader's pace and serial stays (a pipelined trial that
drains the loader's queue looks faster than it can run).

The choice runs for ``recheck`` steps, then the trials run again; each round that confirms the choice doubles the
interval, up to :data:`MAX_RECHECK` times ``recheck``. While a pipelined way runs, its steady state is timed every
:data:`WATCH` training steps; a window slower than serial's mean trial by more than :data:`MARGIN` is a suspicion,
not evidence: a round of paired trials (the choice and serial, timed alike) follows at once, and serial takes over
(a :class:`~lightning_streamprof.pipeline.decision.Revert`) only if those trials no longer find the choice clearly
faster.

Only training is timed: a step the caller marks with :meth:`AutoSwitch.exclude` (a profiler window, validation, a
checkpoint, an epoch's end), and the step after it, are left out of trials and of the steady-state watch, and a
trial runs one step longer for each (up to twice its length). Timings go through ``reduce`` (the mean over DDP
ranks), so that every rank makes the same choice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from lightning_streamprof.pipeline.decision import Decision, Measurement, Revert
from lightning_streamprof.pipeline.way import SERIAL, Way

WARMUP = 10  #: steps before the first trials
TRIAL = 30  #: steps per trial
RECHECK = 1000  #: steps from a decision to the next trials
SETTLE = 3  #: untimed steps at the start of each trial (the switch itself costs a step)
MARGIN = 0.02  #: the gain over serial a pipelined way must beat on average (and the steady state's tolerance)
ROUNDS = 2  #: passes over the ways still in contention in a round of trials
WATCH = 200  #: training steps per steady-state window of a pipelined choice
ABORT_AFTER = 10  #: timed steps after which a trial clearly slower than the best so far ends
CLEAR_LOSS = 0.1  #: slower than the best by more than this: a clear loss
LOADER_BOUND = 0.2  #: serial's share of the step spent waiting for the loader beyond which serial stays
MAX_RECHECK = 8  #: the interval between rounds grows to at most this many times ``recheck``


def check_count(name: str, value: object, least: int) -> None:
    """An argument that counts steps or batches: an integer (not a bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"StreamPipeline: `{name}` must be an integer >= {least}, got {value!r}")


def check_schedule(warmup: object, trial: object, recheck: object, settle: int = SETTLE) -> None:
    """``warmup`` >= 0, ``recheck`` >= 1, and a trial that times at least one step after its untimed start."""
    check_count("warmup", warmup, 0)
    if isinstance(trial, bool) or not isinstance(trial, int) or trial <= settle:
        raise ValueError(f"StreamPipeline: `trial` must be more than {settle} steps (the untimed start), got {trial!r}")
    check_count("recheck", recheck, 1)


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
    """Chooses the way each training batch runs, as the module docstring describes.

    The caller's side, which a different trial design keeps: :meth:`step` once per training batch (it returns
    a :class:`~lightning_streamprof.pipeline.decision.Decision`), :meth:`exclude` for a step that does more than
    train, :meth:`waited` with the seconds each step waited for the loader; ``history`` (each round's
    :class:`~lightning_streamprof.pipeline.decision.Measurement`) and ``reverts`` for reports. ``clock`` gives
    seconds (a fake one in tests); ``sync`` waits for the device before each reading; ``reduce`` averages timings
    across processes (DDP ranks; every rank calls it at the same steps) so that all ranks decide alike. The other
    arguments default to this module's constants of the same names.
    """

    def __init__(
        self, ways: Sequence[Way], warmup: int = WARMUP, trial: int = TRIAL, recheck: int = RECHECK,
        margin: float = MARGIN, settle: int = SETTLE, rounds: int = ROUNDS, watch: int = WATCH,
        abort_after: int = ABORT_AFTER, clear_loss: float = CLEAR_LOSS, loader_bound: float = LOADER_BOUND,
        sync: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.perf_counter,
        max_recheck: int | None = None, reduce: Callable[[list[float]], list[float]] = lambda values: values,
    ) -> None:
        if not ways or ways[0] != SERIAL or len(ways) < 2 or len(set(ways)) != len(ways):
            raise ValueError("AutoSwitch: ways must start with serial and name distinct pipelined ways")
        check_schedule(warmup, trial, recheck, settle)
        self.ways = tuple(ways)
        self.warmup, self.trial, self.recheck, self.margin, self.settle = warmup, trial, recheck, margin, settle
        self.rounds, self.watch, self.clear_loss, self.loader_bound = rounds, watch, clear_loss, loader_bound
        self.abort_after = max(1, min(abort_after, trial - settle))
        self.max_recheck = MAX_RECHECK * recheck if max_recheck is None else max(max_recheck, recheck)
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
        self._decided: Decision | None = None  # what the current step decided, if anything
        self._same = {w: Decision(w) for w in self.ways}  # the decision of a step that changes nothing

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

    def step(self) -> Decision:
        """Call once per training batch: the way for this batch's successor, and what this step decided."""
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
        if self._left <= 0:
            if self._phase < 0:
                self._start_round()
            else:
                self._end_trial(*self._elapsed_ms())
        decided, self._decided = self._decided, None  # a trial cut short may have ended the round above
        return decided if decided is not None else self._same[self.choice]

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
        revert = None
        if suspect is not None and choice == SERIAL and suspect[0] in ms:
            revert = Revert(suspect[0], suspect[1], ms[suspect[0]], ms[SERIAL])
            self.reverts.append(revert)
            confirmed = False
        self._settle_choice(choice, confirmed)
        self._decided = Decision(choice, self.history[-1], revert)

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
