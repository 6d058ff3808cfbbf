"""What profiling cost the training run, as the summary, the HTML report and TensorBoard state it."""

from __future__ import annotations

from dataclasses import dataclass

#: how the cost is measured, in one sentence's words (the overhead budget's rule, profiling/schedule.py)
HOW_MEASURED = ("the slowdown of every step over the unprofiled steps' typical time, from a window's first warm-up "
                "step until its trace is exported and analysed (each step's at most 3x the median of its window's "
                "steps, so that a stall from elsewhere, such as a slow fetch, is not charged), plus the profiler's "
                "own time in the training thread")


@dataclass(frozen=True)
class ProfilingCost:
    """``seconds`` of ``training_seconds`` charged to the profiler over ``windows`` windows; ``end_seconds``: what
    the end of the stage waited for the last exports and wrote the report (None before the stage ends);
    ``max_overhead`` the budget, ``first_window_seconds`` what the first window cost (once settled), and
    ``first_window_parts`` where (``OverheadBudget.first_window_parts``); ``hook_seconds``, apart from them, what
    Lightning's calls of the profiler's hooks took beyond no profiler's over every step (negative where they took
    less), from the median of the sampled steps' ``hook_per_step`` (None before a sample), one step in
    ``hook_sample_every`` timed."""

    seconds: float
    training_seconds: float
    windows: int
    end_seconds: float | None = None
    max_overhead: float | None = None
    first_window_seconds: float | None = None
    first_window_parts: dict[str, float] | None = None
    hook_seconds: float = 0.0
    hook_per_step: float | None = None
    hook_sample_every: int = 0

    @property
    def over_budget(self) -> bool:
        """The cost is above the budget: only the first window can put it there (later ones wait for it)."""
        return self.max_overhead is not None and self.windows > 0 and self.fraction > self.max_overhead

    @property
    def fraction(self) -> float:
        return self.seconds / self.training_seconds if self.training_seconds > 0 else 0.0

    @property
    def hook_fraction(self) -> float:
        return self.hook_seconds / self.training_seconds if self.training_seconds > 0 else 0.0

    def headline(self) -> str:
        """``profiling cost 1.3% of the training time (0.41 s of 31.20 s)``."""
        return (f"profiling cost {100 * self.fraction:.1f}% of the training time ({self.seconds:.2f} s of "
                f"{self.training_seconds:.2f} s)")

    def sentence(self) -> str:
        """The cost over its windows with how it was measured, and what the end of the stage took."""
        windows = f"{self.windows} window{'s' if self.windows != 1 else ''}"
        text = (f"Profiling cost {100 * self.fraction:.1f}% of the training time ({self.seconds:.2f} s of "
                f"{self.training_seconds:.2f} s, {windows}): measured as {HOW_MEASURED}.")
        if self.over_budget:
            first = self.first_window_seconds
            here = f" ({first:.2f} s here{self._parts()})" if first is not None else ""
            text += (f" That is above max_overhead ({100 * self.max_overhead:g}%): the first window is recorded"
                     f" whatever it costs{here}, since nothing is known of a window's cost before one ran, and"
                     " this run was too short to absorb it; the windows after it waited for the budget.")
            if first:
                text += (f" A run of {first / self.max_overhead:.0f} s of training or more holds such a window within"
                         f" max_overhead (this one trained {self.training_seconds:.0f} s).")
        elif self.max_overhead is not None:
            text += f" Within max_overhead ({100 * self.max_overhead:g}%)."
        if self.hook_per_step is not None:
            less = self.hook_per_step < 0
            why = (": the profiler's scope of an action costs less than Lightning's own, and an action no hook handles"
                   " gets a no-op one") if less else ""
            text += (f" Apart from the windows, Lightning's calls of the profiler's hooks took"
                     f" {abs(self.hook_per_step) * 1e6:.0f} µs per step {'less' if less else 'more'} than with no"
                     f" profiler ({100 * abs(self.hook_fraction):.2f}% of the training time; timed in 1 step of"
                     f" {self.hook_sample_every}){why}.")
        elif self.hook_sample_every:
            text += (" The profiler's hooks were not timed: no step outside the windows came to their first sample"
                     " (their cost is in the steps, not in this figure).")
        if self.end_seconds is not None and self.end_seconds >= 0.005:
            text += (f" The end of the stage took {self.end_seconds:.2f} s more for the last window's export and"
                     " the report.")
        return text

    def _parts(self) -> str:
        """``: 0.21 s in Kineto's set-up, start and stop, ...`` for the first window, where known."""
        parts = self.first_window_parts
        if not parts:
            return ""
        words = {"profiler": "Kineto's set-up, start and stop in the training thread",
                 "steps": "slower warm-up and recorded steps",
                 "export": "steps while its trace was saved, analysed and written"}
        said = [f"{parts[k]:.2f} s {words[k]}" for k in words if parts.get(k, 0.0) >= 0.005]
        return ": " + ", ".join(said) if said else ""
