"""What ``auto`` found and chose: a round of trials' :class:`Measurement`, a :class:`Revert` from the steady-state
watch, and the :class:`Decision` that :meth:`~lightning_streamprof.pipeline.auto.AutoSwitch.step` returns for each
batch. Reports and logs read these; how the trials are run is :mod:`~lightning_streamprof.pipeline.auto`'s."""

from __future__ import annotations

from dataclasses import dataclass, field

from lightning_streamprof.pipeline.way import SERIAL, Way


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
    """The chosen pipelined way ran slower in steady state (``watched_ms`` per step over the watch window) than
    serial's trials, and serial, timed again beside it in paired trials (``serial_ms`` against ``way_ms``), was
    not clearly slower: serial took over."""

    way: Way
    watched_ms: float
    way_ms: float
    serial_ms: float

    @property
    def gain(self) -> float:
        """The way's throughput over serial's in the paired trials, minus one (below zero: it lost)."""
        return self.serial_ms / self.way_ms - 1.0


@dataclass(frozen=True)
class Decision:
    """The way the next batch runs; at the step that ends a round of trials, that round (``measured``) and, when
    serial took over from the chosen way there, the :class:`Revert`."""

    way: Way
    measured: Measurement | None = None
    reverted: Revert | None = None

    @property
    def gain(self) -> float | None:
        """The measured gain behind a new choice: the revert's, else the round's (``None``: nothing was decided)."""
        if self.reverted is not None:
            return self.reverted.gain
        return self.measured.gain if self.measured is not None else None
