"""Paired blocks: two ways of running the loop timed so that the host's drift cancels out.

The host's speed drifts by about ±10% over seconds within one run, and can step up or down at any moment. A trial
of one way after a trial of the other measures that drift as much as the ways. Here the two ways alternate in
short blocks, starting and ending with the base way (``B C B C … B``), and each candidate block is compared with
the mean of the base blocks on either side of it: a drift that is close to linear over three blocks cancels, and a
step change of the host's speed spoils at most the one or two ratios whose blocks straddle it.

Decision rule: the ratios ``base ms / candidate ms`` (above 1: the candidate is faster) are summarised by their
median, with a distribution-free confidence interval for the median from the ratios' order statistics (the
binomial sign-test interval, no assumption on the noise's shape, robust to the outliers a step change makes). The
candidate is *faster* when the whole interval lies above 1, *slower* when it lies below, *unclear* otherwise. The
blocks stop early, after :attr:`PairedRule.min_pairs`, once the interval is clear, and at
:attr:`PairedRule.max_pairs` in any case. A difference far beyond what drift and noise make stops them sooner:
after :attr:`PairedRule.quick_pairs`, when every ratio lies beyond ``1 + clear`` (or below its inverse), for a
difference no host's drift gives to every pair (a ±10% wave and a 15% step change move one ratio by at most
about 15%); and after the first pair, when its ratio lies beyond ``1 + decisive`` (or below its inverse), a
difference no drift gives to any one pair (the pipelined frozen ResNet-50 at twice serial's speed on the H200,
where each further serial block costs 1% of a 1,000-step run).

When only one outcome would change anything (a *challenger* that must be measurably faster to take over: serial
beside the pipelined way in force, whose doubt keeps that way), the blocks also stop as soon as that outcome is out
of reach: once so many ratios favour the other way that the challenger's interval cannot clear 1 by
:attr:`PairedRule.max_pairs` (three of them at the default twelve), whatever the pairs still to come. The choice is
then the one the longest run would make; only the blocks it no longer needs are saved (the ways alike: about six
pairs instead of twelve; the challenger behind in each pair: three instead of six).

The first :attr:`PairedRule.settle` steps after each switch are not timed (the switch itself costs a step), nor
are steps the caller leaves out (a profiler window, validation, a checkpoint, an epoch's end) that took longer than
:data:`ORDINARY` times the block's mean timed step: a block runs one step longer for each, up to twice its length.
A step left out that took no longer (the end of an epoch whose loader keeps its workers) is timed like the others,
so that short epochs do not stretch every block.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from lightning_streamprof.pipeline.way import Way

Outcome = Literal["faster", "slower", "unclear"]

#: a step the caller leaves out is timed all the same when it took at most this many times the block's mean step
ORDINARY = 1.5


@dataclass(frozen=True)
class PairedRule:
    """How paired blocks are run and read: ``block`` timed steps per block after ``settle`` untimed ones; at least
    ``min_pairs`` and at most ``max_pairs`` candidate blocks; the interval's ``confidence``; ``quick_pairs`` after
    which a ``clear`` difference in every pair (above ``1 + clear``, or below its inverse) stops the blocks, and the
    ``decisive`` difference that stops them after one pair."""

    block: int = 8
    settle: int = 2
    min_pairs: int = 6
    max_pairs: int = 12
    confidence: float = 0.95
    quick_pairs: int = 3
    clear: float = 0.25
    decisive: float = 0.5

    def __post_init__(self) -> None:
        if self.block < 1 or self.settle < 0:
            raise ValueError(f"PairedRule: `block` must be >= 1 and `settle` >= 0, got {self.block}, {self.settle}")
        if not 1 <= self.min_pairs <= self.max_pairs:
            raise ValueError(f"PairedRule: need 1 <= min_pairs <= max_pairs, got {self.min_pairs}, {self.max_pairs}")
        if not 0 < self.clear <= self.decisive:
            raise ValueError(f"PairedRule: need 0 < clear <= decisive, got {self.clear}, {self.decisive}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"PairedRule: `confidence` must lie in (0.5, 1), got {self.confidence}")

    def early_margin(self, pairs: int) -> float:
        """The difference every one of ``pairs`` pairs must exceed to stop the blocks before ``min_pairs``."""
        return self.decisive if pairs < self.quick_pairs else self.clear

    @property
    def longest(self) -> int:
        """The most steps one run of paired blocks takes (no step left out)."""
        return (2 * self.max_pairs + 1) * (self.settle + self.block)


def interval_order(n: int, confidence: float = 0.95) -> int:
    """The order ``k`` of :func:`median_interval`'s bounds for ``n`` values: the largest for which the chance that
    fewer than ``k`` values fall below the median (a fair binomial) is at most half of ``1 - confidence``; 1 when
    even ``k = 1`` does not reach that (the whole range)."""
    tail = (1.0 - confidence) / 2.0
    k, below = 1, 0.0  # below: P(X < k) for X ~ Binomial(n, 1/2)
    while k < n:
        below += math.comb(n, k - 1) / 2.0**n
        if below + math.comb(n, k) / 2.0**n > tail:
            break
        k += 1
    return max(1, min(k, (n + 1) // 2))


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """A confidence interval for the median of ``values``: the ``k``-th smallest and ``k``-th largest, with ``k``
    from :func:`interval_order`."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return (math.nan, math.nan)
    k = interval_order(n, confidence)
    return (ordered[k - 1], ordered[n - k])


def against(ratios: Sequence[float], challenger_is_candidate: bool) -> int:
    """The ratios on the other way's side of 1 (a tie counts against the challenger: its interval must clear 1)."""
    return sum(1 for r in ratios if (r <= 1.0 if challenger_is_candidate else r >= 1.0))


def out_of_reach(ratios: Sequence[float], challenger_is_candidate: bool, rule: PairedRule) -> bool:
    """Whether the challenger can no longer be found *faster* by :attr:`PairedRule.max_pairs`: its interval clears 1
    only while fewer than ``k`` ratios (the order of the bounds) lie on the other way's side of 1, ``k`` grows with
    the pairs, and the ratios so far stay; so once as many as ``k`` at ``max_pairs`` do, no pair to come helps (nor
    the early stops, which want every ratio on the challenger's side)."""
    return against(ratios, challenger_is_candidate) >= interval_order(rule.max_pairs, rule.confidence)


@dataclass(frozen=True)
class Verdict:
    """What paired blocks of ``base`` and ``candidate`` found: each candidate block's ``ratios`` (its neighbouring
    base blocks' mean ms per step over its own; above 1: the candidate is faster), their median and its
    ``interval``, and the ``outcome``; the mean ms per step of each way's blocks and the steps they took; ``beyond``:
    the difference every pair exceeded when that stopped the blocks early (None: the interval decided);
    ``challenger``: the way that had to be measurably faster, when the blocks stopped because it no longer could
    (``outcome`` is then ``unclear``: the interval did not decide)."""

    base: Way
    candidate: Way
    ratios: tuple[float, ...]
    interval: tuple[float, float]
    outcome: Outcome
    base_ms: float
    candidate_ms: float
    steps: int
    beyond: float | None = None
    challenger: Way | None = None

    @property
    def ratio(self) -> float:
        """The median ratio (above 1: the candidate is faster)."""
        return statistics.median(self.ratios) if self.ratios else math.nan

    def describe(self) -> str:
        """One line: the candidate's speed as a multiple of the base's, with its interval, the blocks and the
        outcome."""
        pairs, outcome = len(self.ratios), self.outcome
        if self.beyond is not None:  # a few pairs, every one far apart: no interval is meant
            which = "one pair of blocks" if pairs == 1 else f"{pairs} pairs of blocks, each"
            how = f"{which} beyond {1 + self.beyond:.2f}x"
        elif self.challenger is not None:  # stopped once the challenger could no longer be measurably faster
            on_candidate = self.challenger == self.candidate
            other = self.base if on_candidate else self.candidate
            how = f"{against(self.ratios, on_candidate)} of {pairs} paired blocks for {other.label}"
            outcome = f"{self.challenger.label} cannot be measurably faster"
        else:
            lo, hi = self.interval
            how = f"95% interval {lo:.3f}-{hi:.3f}, {pairs} paired blocks"
        return (f"{self.candidate.label}: {self.ratio:.3f}x the speed of {self.base.label} ({how}, {self.steps} steps;"
                f" {self.candidate_ms:.3f} against {self.base_ms:.3f} ms per step) -> {outcome}")


def clear_outcome(ratios: Sequence[float], rule: PairedRule) -> Outcome | None:
    """``faster`` or ``slower`` when every ratio lies beyond the ``decisive`` difference, or at least
    ``quick_pairs`` ratios all lie beyond the ``clear`` one."""
    if not ratios:
        return None
    beyond = rule.early_margin(len(ratios))
    if min(ratios) > 1.0 + beyond:
        return "faster"
    if max(ratios) < 1.0 / (1.0 + beyond):
        return "slower"
    return None


def read_ratios(ratios: Sequence[float], rule: PairedRule) -> Outcome:
    """``faster``, ``slower`` or ``unclear`` by the interval of the median ratio (see the module)."""
    lo, hi = median_interval(ratios, rule.confidence)
    if lo > 1.0:
        return "faster"
    if hi < 1.0:
        return "slower"
    return "unclear"


@dataclass
class _Block:
    way: Way
    settle_left: int
    timed_left: int
    extra_left: int
    start: float = math.nan
    timed: int = 0
    timed_s: float = 0.0
    skipped_s: float = 0.0

    def typical(self, earlier: tuple[float, int]) -> float | None:
        """The mean timed step in seconds: the block's, or, before two of them, that of the way's ``earlier``
        blocks (their seconds and steps); None before two timed steps."""
        total, count = (self.timed_s, self.timed) if self.timed >= 2 else earlier
        return total / count if count >= 2 else None

    def ms(self, now: float) -> float:
        return (now - self.start - self.skipped_s) * 1e3 / max(1, self.timed)


@dataclass
class PairedBlocks:
    """Runs paired blocks of ``base`` and ``candidate`` (see the module): :attr:`way` is the way to run for the next
    step, :meth:`step` is called once per step and returns the :class:`Verdict` when the blocks are done.

    ``clock`` gives seconds; ``sync`` waits for the device before each reading that opens or closes a block;
    ``reduce`` averages a block's ms per step across processes (every rank calls it at the same steps, so all
    decide alike); ``challenger`` (``base`` or ``candidate``, or None when both outcomes matter): the way whose
    *faster* outcome alone would change the caller's choice, so that the blocks stop once it is out of reach."""

    base: Way
    candidate: Way
    rule: PairedRule
    clock: Callable[[], float]
    sync: Callable[[], None] = lambda: None
    reduce: Callable[[list[float]], list[float]] = lambda values: values
    challenger: Way | None = None
    _blocks: list[tuple[Way, float]] = field(default_factory=list)
    _timed: dict[Way, tuple[float, int]] = field(default_factory=dict)  # each way's timed seconds and steps so far
    _block: _Block | None = None
    _steps: int = 0
    _mark: float = math.nan

    def __post_init__(self) -> None:
        if self.challenger not in (None, self.base, self.candidate):
            raise ValueError(f"PairedBlocks: the challenger {self.challenger.label} is neither way compared")
        self._block = self._new_block(self.base)
        self._mark = self.clock()

    @property
    def way(self) -> Way:
        """The way the next step runs."""
        return self._block.way if self._block is not None else self.base

    def step(self, left_out: bool = False) -> Verdict | None:
        """One step has run (``left_out``: it was not training alone); the verdict once the blocks are done."""
        block = self._block
        if block is None:
            raise RuntimeError("PairedBlocks: the blocks are done")
        self._steps += 1
        now = self.clock()
        interval, self._mark = now - self._mark, now
        if block.settle_left > 0:
            block.settle_left -= 1
            if block.settle_left == 0:
                self._open(block)
            return None
        if left_out and block.extra_left > 0 and not self._ordinary(block, interval):
            block.extra_left -= 1
            block.skipped_s += interval
            return None
        block.timed += 1
        block.timed_s += interval
        block.timed_left -= 1
        if block.timed_left > 0:
            return None
        self.sync()
        ms = self.reduce([block.ms(self.clock())])[0]
        self._blocks.append((block.way, ms))
        seconds, steps = self._timed.get(block.way, (0.0, 0))
        self._timed[block.way] = (seconds + block.timed_s, steps + block.timed)
        verdict = self._verdict()
        if verdict is not None:
            self._block = None
            return verdict
        self._block = self._new_block(self.candidate if block.way == self.base else self.base)
        return None

    def _ordinary(self, block: _Block, seconds: float) -> bool:
        """Whether a step left out took no longer than :data:`ORDINARY` times the block's typical step, both
        averaged over the processes (every rank marks the same steps, so all decide alike and call ``reduce``
        together)."""
        typical = block.typical(self._timed.get(block.way, (0.0, 0)))
        if typical is None:
            return False
        seconds, typical = self.reduce([seconds, typical])
        return seconds <= ORDINARY * typical

    def _new_block(self, way: Way) -> _Block:
        block = _Block(way, self.rule.settle, self.rule.block, self.rule.block)
        if block.settle_left == 0:
            self._open(block)
        return block

    def _open(self, block: _Block) -> None:
        self.sync()
        block.start = self.clock()
        self._mark = block.start

    def ratios(self) -> list[float]:
        """Each candidate block's ratio to the mean of the base blocks on either side of it."""
        out = []
        for i in range(1, len(self._blocks) - 1, 2):
            before, (_, candidate), after = self._blocks[i - 1][1], self._blocks[i], self._blocks[i + 1][1]
            out.append((before + after) / 2.0 / candidate)
        return out

    def _verdict(self) -> Verdict | None:
        """The verdict when a base block has just closed and the rule says stop; else None."""
        if len(self._blocks) % 2 == 0:  # a candidate block closed: its right-hand neighbour is still to come
            return None
        ratios = self.ratios()
        outcome = read_ratios(ratios, self.rule)
        pairs = len(ratios)
        quick = clear_outcome(ratios, self.rule) if pairs < self.rule.min_pairs else None
        beyond, settled = None, None
        if quick is not None:
            outcome, beyond = quick, self.rule.early_margin(pairs)
        elif pairs < self.rule.max_pairs and (pairs < self.rule.min_pairs or outcome == "unclear"):
            if self.challenger is None or not out_of_reach(ratios, self.challenger == self.candidate, self.rule):
                return None
            outcome, settled = "unclear", self.challenger  # below min_pairs the interval has not its confidence
        base = [ms for way, ms in self._blocks if way == self.base]
        candidate = [ms for way, ms in self._blocks if way == self.candidate]
        return Verdict(self.base, self.candidate, tuple(ratios), median_interval(ratios, self.rule.confidence),
                       outcome, statistics.fmean(base), statistics.fmean(candidate), self._steps, beyond, settled)
