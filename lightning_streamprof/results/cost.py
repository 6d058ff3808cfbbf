"""What profiling cost a stage: the windows' measured cost against the training time, as the overhead budget
(:class:`~lightning_streamprof.profiling.schedule.OverheadBudget`) counted it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProfilingCost:
    """``seconds`` of ``training_seconds`` charged to the profiler over ``windows`` windows; ``end_seconds``: what
    the end of the stage waited for the last exports and took to write the report (None before the stage ends);
    ``max_overhead`` the budget; ``first_window_seconds`` what the first window cost (once settled) and
    ``first_window_parts`` where it went (``OverheadBudget.first_window_parts``)."""

    seconds: float
    training_seconds: float
    windows: int
    end_seconds: float | None = None
    max_overhead: float | None = None
    first_window_seconds: float | None = None
    first_window_parts: dict[str, float] | None = None

    @property
    def fraction(self) -> float:
        """The cost as a share of the training time (0 before any training time)."""
        return self.seconds / self.training_seconds if self.training_seconds > 0 else 0.0

    @property
    def over_budget(self) -> bool:
        """The cost is above the budget: only the first window can put it there (later ones wait for it)."""
        return self.max_overhead is not None and self.windows > 0 and self.fraction > self.max_overhead
