"""A fake host for timing tests: steps whose length drifts as a GPU host's does; whole ``mode="auto"`` runs on it
(also read by ``benchmarks/auto_fake_host.py``)."""

import math
import random

from lightning_streamprof.pipeline.auto import AutoSwitch
from lightning_streamprof.pipeline.way import INLINE, SERIAL, Way

GRAPH = Way(True, True, True)


class Host:
    """A fake host: each step of a way lasts its ms, times a ±``wave`` slow sine (period 2-20 s), a ``change``
    step of the host's speed at a random moment of the trial, and uniform ±``noise`` per step."""

    def __init__(self, seed, ms, wave=0.10, change=0.15, noise=0.05):
        self.rng = random.Random(seed)
        self.t = 0.0
        self.ms = ms
        self.period = self.rng.uniform(2, 20)
        self.phase = self.rng.uniform(0, 2 * math.pi)
        self.wave, self.noise = wave, noise
        self.change_at = self.rng.uniform(0.2, 1.5)
        self.change = self.rng.choice([-1, 1]) * change

    def clock(self):
        return self.t

    def run(self, way):
        f = 1 + self.wave * math.sin(2 * math.pi * self.t / self.period + self.phase)
        if self.t > self.change_at:
            f *= 1 + self.change
        self.t += self.ms[way] * f * (1 + self.rng.uniform(-self.noise, self.noise)) / 1e3


def whole_run(seed, serial_ms, piped_ms, steps):
    """A whole run of ``steps`` steps of auto on the drifting host (serial, the graph way at ``piped_ms``, the inline
    way 2% slower): the switch (its rounds and reverts), and what its trials cost over always running the faster way
    (a fraction of the run)."""
    host = Host(seed, {SERIAL: serial_ms, GRAPH: piped_ms, INLINE: piped_ms * 1.02})
    switch = AutoSwitch((SERIAL, INLINE, GRAPH), clock=host.clock)
    best = min(serial_ms, piped_ms)
    spent = ideal = 0.0
    for _ in range(steps):
        t0 = host.t
        host.run(switch.choice)
        spent += host.t - t0
        ideal += (host.t - t0) * best / host.ms[switch.choice]
        switch.step()
    return switch, spent / ideal - 1.0
