"""What ``auto`` found and chose: each round's :class:`Round` of paired comparisons, a :class:`Revert` from the
steady-state watch, and the :class:`Decision` that :meth:`~lightning_streamprof.pipeline.auto.AutoSwitch.step`
returns for each batch. Reports and logs read these; how the rounds are run is
:mod:`~lightning_streamprof.pipeline.auto`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass

from lightning_streamprof.pipeline.paired import Verdict
from lightning_streamprof.pipeline.way import SERIAL, Way


@dataclass(frozen=True)
class Round:
    """One round of trials, ended at training step ``step``: why it ran (``first``, ``recheck``, ``watch``,
    ``phase``), its paired comparisons in order (the first: a pipelined way and serial), the ``choice``, and
    the ms per step the loop waited for the loader during it."""

    step: int
    reason: str
    verdicts: tuple[Verdict, ...]
    choice: Way
    wait_ms: float = 0.0

    def speeds(self) -> dict[Way, float]:
        """Each compared way's speed relative to serial's (steps per second over serial's), chained through the
        comparisons: a way compared with a pipelined way gets that way's speed times their ratio."""
        speed = {SERIAL: 1.0}
        for v in self.verdicts:
            if v.base in speed:
                speed[v.candidate] = speed[v.base] * v.ratio
            elif v.candidate in speed:
                speed[v.base] = speed[v.candidate] / v.ratio
        return speed

    @property
    def steps(self) -> int:
        """The training steps its comparisons timed."""
        return sum(v.steps for v in self.verdicts)

    @property
    def gain(self) -> float:
        """The choice's throughput over serial's, minus one; when serial was chosen, the best pipelined way's
        (at most about zero)."""
        speed = self.speeds()
        if self.choice != SERIAL:
            return speed[self.choice] - 1.0
        piped = [s for w, s in speed.items() if w != SERIAL]
        return max(piped) - 1.0 if piped else math.nan

    @property
    def ms(self) -> dict[Way, float]:
        """The mean ms per step of each compared way's blocks (the latest comparison's, for a way in two)."""
        out: dict[Way, float] = {}
        for v in self.verdicts:
            out[v.base], out[v.candidate] = v.base_ms, v.candidate_ms
        return out

    def ms_of(self, way: Way) -> float | None:
        """The mean ms per step of ``way``'s blocks in this round (``None``: not compared)."""
        for v in reversed(self.verdicts):
            if v.candidate == way:
                return v.candidate_ms
            if v.base == way:
                return v.base_ms
        return None


@dataclass(frozen=True)
class Revert:
    """The chosen pipelined ``way`` ran slower in steady state (``watched_ms`` per step over the watch window)
    than in its blocks, by more than the watch's ``tolerance`` (a fraction); serial, timed beside it in paired blocks
    (``verdict``), was measurably faster and took over at training step ``step``."""

    way: Way
    watched_ms: float
    step: int
    verdict: Verdict
    tolerance: float = 0.15

    @property
    def gain(self) -> float:
        """The way's throughput over serial's in the paired blocks, minus one (below zero: it lost)."""
        v = self.verdict
        return (1.0 / v.ratio if v.candidate == SERIAL else v.ratio) - 1.0


@dataclass(frozen=True)
class Decision:
    """The way the next batch runs; at the step that ends a round, that round (``measured``) and, when serial took
    over from the chosen way there, the :class:`Revert`."""

    way: Way
    measured: Round | None = None
    reverted: Revert | None = None

    @property
    def gain(self) -> float | None:
        """The measured gain behind a new choice: the revert's, else the round's (``None``: nothing was decided)."""
        if self.reverted is not None:
            return self.reverted.gain
        return self.measured.gain if self.measured is not None else None
