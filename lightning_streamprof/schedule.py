"""Where the profiling windows fall in a run: step numbers only, no timing and no torch."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Phase(enum.Enum):
    IDLE = "idle"
    WARMUP = "warmup"
    ACTIVE = "active"


@dataclass(frozen=True)
class Window:
    """One profiling window: warm-up steps ``[warmup_start, start)``, recorded steps ``[start, stop)``."""

    index: int
    warmup_start: int
    start: int
    stop: int

    def phase(self, step: int) -> Phase:
        if self.start <= step < self.stop:
            return Phase.ACTIVE
        if self.warmup_start <= step < self.start:
            return Phase.WARMUP
        return Phase.IDLE


@dataclass(frozen=True)
class WindowSchedule:
    """Sampled windows across a whole run.

    Steps ``0 .. skip_first-1`` are never profiled. Window ``k`` warms up for ``warmup`` steps and records
    ``active`` steps starting at step ``skip_first + warmup + k * every``. ``every=0`` gives a single
    window; ``repeat > 0`` stops after that many windows.
    """

    skip_first: int = 20
    warmup: int = 2
    active: int = 3
    every: int = 0
    repeat: int = 0

    def __post_init__(self) -> None:
        for name in ("skip_first", "warmup", "every", "repeat"):
            if getattr(self, name) < 0:
                raise ValueError(f"WindowSchedule: `{name}` must be >= 0, got {getattr(self, name)}")
        if self.active < 1:
            raise ValueError(f"WindowSchedule: `active` must be >= 1, got {self.active}")
        if self.every and self.every < self.warmup + self.active:
            raise ValueError(
                f"WindowSchedule: `every` ({self.every}) must be 0 (one window) or at least"
                f" warmup + active ({self.warmup + self.active}) so that windows do not overlap"
            )

    @property
    def max_windows(self) -> int | None:
        """How many windows the schedule allows, ``None`` for unlimited."""
        if self.every == 0:
            return 1
        return self.repeat or None

    def window(self, index: int, not_before: int = 0) -> Window | None:
        """Window ``index`` on the ``every`` grid, moved to the first grid point whose warm-up starts at or
        after step ``not_before``; ``None`` past the ``repeat`` limit or for a later window of a one-window
        schedule."""
        limit = self.max_windows
        if limit is not None and index >= limit:
            return None
        start = self.skip_first + self.warmup + index * self.every
        if start - self.warmup < not_before:
            if self.every == 0:
                start = not_before + self.warmup
            else:
                grid_steps = -(-(not_before + self.warmup - start) // self.every)
                start += grid_steps * self.every
        return Window(index=index, warmup_start=start - self.warmup, start=start, stop=start + self.active)

    def windows_until(self, total_steps: int) -> list[Window]:
        """All windows whose recorded steps begin before ``total_steps`` (no deferral)."""
        windows = []
        index = 0
        while (w := self.window(index)) is not None and w.start < total_steps:
            windows.append(w)
            index += 1
            if self.every == 0:
                break
        return windows
