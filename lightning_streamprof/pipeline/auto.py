"""``mode="auto"``: time serial and pipelined steps, keep the faster, check again now and then."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Measurement:
    serial_ms: float
    pipelined_ms: float

    @property
    def gain(self) -> float:
        """Pipelined throughput over serial throughput, minus one."""
        return self.serial_ms / self.pipelined_ms - 1.0


class AutoSwitch:
    """Phases of ``trial`` steps each: serial, pipelined, serial, pipelined (alternating, so that drift in
    the loader or the machine cancels out); then the faster runs for ``recheck`` steps.

    Pipelining is kept only when it is faster by more than ``margin``. Each phase's first ``settle`` steps
    are not timed (the switch itself costs a step). ``sync`` waits for the device at phase edges.
    """

    def __init__(
        self, warmup: int = 20, trial: int = 30, recheck: int = 1000, margin: float = 0.01, settle: int = 3,
        sync: Callable[[], None] = lambda: None,
    ) -> None:
        self.warmup, self.trial, self.recheck, self.margin, self.settle = warmup, trial, recheck, margin, settle
        self.sync = sync
        self.pipelined = False
        self.history: list[Measurement] = []
        self._phase = "warmup"
        self._left = warmup
        self._t0 = 0.0
        self._times: dict[str, list[float]] = {"serial": [], "pipelined": []}
        self._trials = 0

    def step(self) -> bool:
        """Call once per training batch; returns whether this batch's successor should be staged."""
        self._left -= 1
        if self._left == self.trial - self.settle and self._phase in ("serial", "pipelined"):
            self.sync()
            self._t0 = time.perf_counter()
        if self._left > 0:
            return self.pipelined
        if self._phase in ("warmup", "run"):
            self._times = {"serial": [], "pipelined": []}
            self._enter("serial", pipelined=False)
        else:
            self._times[self._phase].append(self._elapsed_ms())
            if self._phase == "serial":
                self._enter("pipelined", pipelined=True)
            elif len(self._times["pipelined"]) < 2:
                self._enter("serial", pipelined=False)
            else:
                m = Measurement(sum(self._times["serial"]) / 2, sum(self._times["pipelined"]) / 2)
                self.history.append(m)
                self._enter("run", pipelined=m.gain > self.margin, steps=self.recheck)
        return self.pipelined

    def _elapsed_ms(self) -> float:
        self.sync()
        return (time.perf_counter() - self._t0) * 1e3 / (self.trial - self.settle)

    def _enter(self, phase: str, pipelined: bool, steps: int | None = None) -> None:
        self._phase, self.pipelined = phase, pipelined
        self._left = steps if steps is not None else self.trial
