"""``mode="auto"``: keep what ``mode="on"`` runs unless serial is measurably faster beside it.

The *safe way* is the pipelined way ``mode="on"`` runs (the first of :func:`trial_order`: the frozen calls as a
CUDA graph, on the staging thread, where those exist); its results equal serial training's. The run starts on it.
After ``warmup`` steps a round of trials compares ways two at a time in paired blocks
(:mod:`~lightning_streamprof.pipeline.paired`: the two ways alternate in short blocks, each block read against
its neighbours, so that the host's drift cancels out), and decides by the median ratio's interval (the blocks stop
early once the way that must be measurably faster no longer can be,
:func:`~lightning_streamprof.pipeline.paired.out_of_reach`):

1. the safe way (or the pipelined way in force) against serial: serial takes over only when measurably *faster*
   beside it; when it is unclear, the pipelined way runs. The way in force is the base of the blocks (it runs the
   one block more);
2. in the first round, when serial was measurably faster than the safe way, each other pipelined way against
   serial: it takes over only when measurably *faster*. When the safe way won or it was unclear, the other ways
   are not tried: the safe way runs without further cost (their trials cost more than they found on the H200:
   the inline way at 0.88x the safe way's speed on the article's workload, ``pipeline_runs-i34-article8``).

The choice then runs for ``recheck`` steps and a round of step 1 alone runs again (serial against the pipelined
way in force, or against the safe way when serial runs: the upgrade path); each round that keeps the choice
doubles the interval, up to :data:`MAX_RECHECK` times ``recheck``. A pipelined way that beat serial by the
decisive margin (one pair beyond 1.5x) runs the longest interval at once: a drift that closes such a gap slows that
way by a third, which the steady-state watch sees first, while each needless round costs a serial block and two
switches (on the 2,000-step ViT probe, 110 ms of a 14 s run on an H100). A change of phase while serial runs (an epoch,
a new dataloader, validation) brings the next round forward to :data:`PHASE_DELAY` steps later, at most once
every :data:`PHASE_GAP` steps. While a pipelined way runs, its steady state is timed every :data:`WATCH` training
steps; a window slower than that way's own blocks by more than :data:`WATCH_TOLERANCE`, or by half the margin it
beat serial by when that is more (the host's drift of ±15% moves both ways; only a slowdown that ate a good part of
the margin can make serial faster), is a suspicion, not evidence: a round follows at once, and serial takes over (a
:class:`~lightning_streamprof.pipeline.decision.Revert`) only if serial is measurably faster beside it.

Only training is timed: a step the caller marks with :meth:`AutoSwitch.exclude` (a profiler window, validation, a
checkpoint, an epoch's end), and the step after it, are left out of the blocks and of the steady-state watch.
Timings go through ``reduce`` (the mean over DDP ranks), so that every rank makes the same choice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from lightning_streamprof.pipeline.decision import Decision, Revert, Round
from lightning_streamprof.pipeline.paired import PairedBlocks, PairedRule, Verdict
from lightning_streamprof.pipeline.way import SERIAL, Way

WARMUP = 10  #: steps on the safe way before the first trials
TRIAL = 10  #: steps per block of paired trials, the first :data:`SETTLE` untimed
SETTLE = 2  #: untimed steps at the start of each block (the switch itself costs a step)
RECHECK = 1000  #: steps from a decision to the next round
MAX_RECHECK = 8  #: the interval between rounds grows to at most this many times ``recheck``
WATCH = 200  #: training steps per steady-state window of a pipelined choice
WATCH_TOLERANCE = 0.15  #: a window slower than its way's blocks by more than this calls a round at once
PHASE_DELAY = 20  #: steps after a change of phase (serial running) before the round it brings forward
PHASE_GAP = 250  #: the fewest steps from the end of a round to one that a change of phase brings forward


def check_count(name: str, value: object, least: int) -> None:
    """An argument that counts steps or batches: an integer (not a bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"StreamPipeline: `{name}` must be an integer >= {least}, got {value!r}")


def check_schedule(warmup: object, trial: object, recheck: object, settle: int = SETTLE) -> None:
    """``warmup`` >= 0, ``recheck`` >= 1, and a block that times at least one step after its untimed start."""
    check_count("warmup", warmup, 0)
    if isinstance(trial, bool) or not isinstance(trial, int) or trial <= settle:
        raise ValueError(f"StreamPipeline: `trial` must be more than {settle} steps (the untimed start), got {trial!r}")
    check_count("recheck", recheck, 1)


def trial_order(ways: Sequence[Way]) -> list[Way]:
    """The pipelined ways, the most promising first (graphs, then the staging thread): the first is the safe way,
    the one ``mode="on"`` runs."""
    return sorted((w for w in ways if w != SERIAL), key=lambda w: (not w.graph, not w.thread))


@dataclass
class _Watch:
    """A steady-state window's timed span: its start, and the steps and seconds left out of it."""

    start: float
    timed: int = 0
    skipped_s: float = 0.0


class AutoSwitch:
    """Chooses the way each training batch runs, as the module docstring describes.

    The caller's side: :meth:`step` once per training batch (it returns a
    :class:`~lightning_streamprof.pipeline.decision.Decision`), :meth:`exclude` for a step that does more than
    train, :meth:`phase_changed` at a new epoch or after validation, :meth:`waited` with the seconds each step waited
    for the loader; ``history`` (each :class:`~lightning_streamprof.pipeline.decision.Round`) and ``reverts`` for
    reports. ``clock`` gives seconds (a fake one in tests); ``sync`` waits for the device before each reading of the
    paired blocks (not the steady-state watch's, whose windows are long enough to read unsynchronised);
    ``reduce`` averages timings across processes (DDP ranks; every rank calls it at the same steps) so that all
    ranks decide alike. ``trial`` is the length of a block (:attr:`PairedRule.block` is ``trial - settle``); the
    other arguments default to this module's constants of the same names and to :class:`PairedRule`'s.
    """

    def __init__(
        self, ways: Sequence[Way], warmup: int = WARMUP, trial: int = TRIAL, recheck: int = RECHECK,
        settle: int = SETTLE, watch: int = WATCH, watch_tolerance: float = WATCH_TOLERANCE,
        min_pairs: int = PairedRule.min_pairs, max_pairs: int = PairedRule.max_pairs,
        sync: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.perf_counter,
        max_recheck: int | None = None, reduce: Callable[[list[float]], list[float]] = lambda values: values,
    ) -> None:
        if not ways or ways[0] != SERIAL or len(ways) < 2 or len(set(ways)) != len(ways):
            raise ValueError("AutoSwitch: ways must start with serial and name distinct pipelined ways")
        check_schedule(warmup, trial, recheck, settle)
        self.ways = tuple(ways)
        self.safe = trial_order(ways)[0]
        self.rule = PairedRule(block=trial - settle, settle=settle, min_pairs=min_pairs, max_pairs=max_pairs)
        self.recheck, self.watch, self.watch_tolerance = recheck, watch, watch_tolerance
        self.max_recheck = MAX_RECHECK * recheck if max_recheck is None else max(max_recheck, recheck)
        self.sync, self.clock, self.reduce = sync, clock, reduce
        self.interval = recheck  # steps from the last decision to the next round
        self.choice: Way = self.safe
        self.history: list[Round] = []
        self.reverts: list[Revert] = []
        self.steps = 0  # training steps seen
        self._left = warmup  # steps to the next round
        self._blocks: PairedBlocks | None = None  # the comparison under way
        self._queue: list[Way] = []  # the ways still to compare with the winner in this round
        self._doubt: Way = self.safe  # the pipelined way that serial is timed against in this round
        self._verdicts: list[Verdict] = []
        self._reason = "first"
        self._suspect: float | None = None  # the steady-state ms per step that called this round
        self._suspect_tolerance = watch_tolerance  # the tolerance it went beyond
        self._exclude = 0  # steps still to leave out (the marked step and the one after it)
        self._mark = 0.0  # the clock at the last step (unsynchronised)
        self._watch: _Watch | None = None
        self._watch_settle = 0
        self._wait = 0.0  # seconds waited for the loader in this round
        self._round_steps = 0
        self._last_round_end = 0
        self._same = {w: Decision(w) for w in self.ways}  # the decision of a step that changes nothing

    @property
    def pipelined(self) -> bool:
        return self.choice != SERIAL

    @property
    def decided(self) -> bool:
        """Whether the first round has chosen a way."""
        return bool(self.history)

    @property
    def in_trials(self) -> bool:
        return self._blocks is not None

    def waited(self, seconds: float) -> None:
        """The loop waited ``seconds`` for the loader in this step."""
        if self._blocks is not None:
            self._wait += seconds

    def exclude(self) -> None:
        """The step now running is not training alone: leave it (and the step after it) out of the timings."""
        self._exclude = 2

    def phase_changed(self) -> None:
        """A new epoch, a new dataloader or validation: while serial runs, the next round comes sooner."""
        if self._blocks is None and self.choice == SERIAL and self.history:
            soonest = self._last_round_end + PHASE_GAP - self.steps
            self._left = min(self._left, max(PHASE_DELAY, soonest))

    def step(self) -> Decision:
        """Call once per training batch: the way for this batch's successor, and what this step decided."""
        self.steps += 1
        left_out = self._exclude > 0
        self._exclude = max(0, self._exclude - 1)
        blocks = self._blocks
        if blocks is not None:
            return self._trial_step(blocks, left_out)
        if self.choice != SERIAL:
            self._watch_step(left_out)
        self._left -= 1
        if self._left <= 0:
            self._start_round()
        return self._same[self.choice]

    # ------------------------------------------------------------------ rounds

    def _start_round(self, reason: str | None = None) -> None:
        first = not self.history
        self._reason = reason or ("first" if first else "recheck")
        self._verdicts, self._wait, self._round_steps = [], 0.0, 0
        self._doubt = self.choice if self.choice != SERIAL else self.safe  # the way an unclear verdict keeps
        self._queue = [w for w in trial_order(self.ways) if w != self._doubt] if first else []
        if self.choice == SERIAL:
            self._compare(SERIAL, self._doubt)
        else:  # the way in force is the base: it runs the one block more
            self._compare(self._doubt, SERIAL)

    def _compare(self, base: Way, candidate: Way) -> None:
        # the way that must be measurably faster to change the choice (see _winner): the blocks stop once it cannot
        challenger = SERIAL if {base, candidate} == {SERIAL, self._doubt} else candidate
        self._blocks = PairedBlocks(base, candidate, self.rule, self.clock, self.sync, self.reduce, challenger)
        self.choice = self._blocks.way

    def _trial_step(self, blocks: PairedBlocks, left_out: bool) -> Decision:
        self._round_steps += 1
        verdict = blocks.step(left_out)
        if verdict is None:
            self.choice = blocks.way
            return self._same[self.choice]
        self._verdicts.append(verdict)
        winner = self._winner(verdict)
        if len(self._verdicts) == 1 and winner != SERIAL:
            self._queue = []  # serial was not measurably faster than the safe way: the safe way stays
        if self._queue:
            self._compare(winner, self._queue.pop(0))
            return self._same[self.choice]
        return self._decide(winner)

    def _beat_serial_decisively(self, way: Way) -> bool:
        """Whether this round timed ``way`` beside serial and stopped on the decisive margin (``way`` won it: it is
        the choice). Serial's decisive win over the safe way, before another way beat serial, is not one."""
        return any({v.base, v.candidate} == {SERIAL, way} and v.beyond == self.rule.decisive for v in self._verdicts)

    def _winner(self, verdict: Verdict) -> Way:
        """Serial against the way in doubt: serial only when measurably faster. Any other pair: the candidate only
        when measurably faster."""
        if {verdict.base, verdict.candidate} == {SERIAL, self._doubt}:
            serial_faster = verdict.outcome == ("faster" if verdict.candidate == SERIAL else "slower")
            return SERIAL if serial_faster else self._doubt
        return verdict.candidate if verdict.outcome == "faster" else verdict.base

    def _decide(self, choice: Way) -> Decision:
        self._blocks = None
        previous = self.history[-1].choice if self.history else None
        wait_ms = self._wait * 1e3 / max(1, self._round_steps)
        measured = Round(self.steps, self._reason, tuple(self._verdicts), choice, wait_ms)
        self.history.append(measured)
        revert = None
        if self._suspect is not None and choice == SERIAL and previous is not None and previous != SERIAL:
            revert = Revert(previous, self._suspect, self.steps, self._verdicts[0], self._suspect_tolerance)
            self.reverts.append(revert)
        self._suspect = None
        confirmed = previous == choice and revert is None
        if choice != SERIAL and revert is None and self._beat_serial_decisively(choice):
            self.interval = self.max_recheck  # far ahead of serial: the watch guards it (see the module)
        else:
            self.interval = min(2 * self.interval, self.max_recheck) if confirmed else self.recheck
        self.choice, self._left, self._last_round_end = choice, self.interval, self.steps
        self._watch, self._watch_settle = None, self.rule.settle
        return Decision(choice, measured, revert)

    # ------------------------------------------------------------------ steady state

    def _watch_step(self, left_out: bool) -> None:
        now = self.clock()
        interval, self._mark = now - self._mark, now
        if self._watch_settle > 0:
            self._watch_settle -= 1
            return
        if self._watch is None:  # unsynchronised: a window of steps is off by the queue's step or two, and the
            self._watch = _Watch(self.clock())  # device runs on (a wait each window cost the overlap it drained)
            self._mark = self._watch.start
            return
        watch = self._watch
        if left_out:
            watch.skipped_s += interval
            return
        watch.timed += 1
        if watch.timed < self.watch:
            return
        steady = self.reduce([(self.clock() - watch.start - watch.skipped_s) * 1e3 / watch.timed])[0]
        self._watch = None
        reference, limit = self._reference(), self.watch_limit
        if limit is not None and steady > reference * (1 + limit):
            self._suspect, self._suspect_tolerance = steady, limit
            self._start_round("watch")

    @property
    def next_round(self) -> int | None:
        """The step at which the next round of trials starts, unless the watch or a change of phase brings it
        forward; None while one is under way."""
        return None if self._blocks is not None else self.steps + max(self._left, 1)

    @property
    def watch_limit(self) -> float | None:
        """How much slower than in its blocks (a fraction) the pipelined way in force may run before the watch calls
        a round; None while serial runs or before the first round."""
        reference = self._reference()
        return self._tolerance(reference) if reference is not None else None

    def _reference(self) -> float | None:
        """The ms per step of the pipelined way in force in the last round's blocks (None: serial runs, no round
        yet, or that way was not timed in it)."""
        if self.choice == SERIAL or not self.history:
            return None
        return self.history[-1].ms_of(self.choice)

    def _tolerance(self, reference: float) -> float:
        """How much slower than its blocks (``reference`` ms) the way in force may run before a round is called:
        :attr:`watch_tolerance`, or half its margin over serial in the last round when that is more."""
        serial = self.history[-1].ms_of(SERIAL)
        margin = serial / reference - 1.0 if serial and reference > 0 else 0.0
        return max(self.watch_tolerance, margin / 2.0)
