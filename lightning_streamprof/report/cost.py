"""What profiling cost the training run, in the words of the summary, the HTML report and TensorBoard."""

from __future__ import annotations

from lightning_streamprof.results import ProfilingCost
from lightning_streamprof.words import counted

#: how the cost is measured, in one sentence's words (the overhead budget's rule, profiling/schedule.py)
HOW_MEASURED = ("the slowdown of every step over the unprofiled steps' typical time, from a window's first warm-up "
                "step until its trace is exported and analysed (each step's at most 3x the median of its window's "
                "steps, so that a stall from elsewhere, such as a slow fetch, is not charged), plus the profiler's "
                "own time in the training thread")
#: the parts of the first window's cost (``ProfilingCost.first_window_parts``) in words
_PARTS = {"profiler": "Kineto's set-up, start and stop in the training thread",
          "steps": "slower warm-up and recorded steps",
          "export": "steps while its trace was saved, analysed and written"}


def cost_headline(cost: ProfilingCost) -> str:
    """``profiling cost 1.3% of the training time (0.41 s of 31.20 s)``."""
    return (f"profiling cost {100 * cost.fraction:.1f}% of the training time ({cost.seconds:.2f} s of "
            f"{cost.training_seconds:.2f} s)")


def cost_sentence(cost: ProfilingCost) -> str:
    """The cost over its windows with how it was measured, against the budget, and what the end of the stage took."""
    windows = counted(cost.windows, "window")
    text = (f"Profiling cost {100 * cost.fraction:.1f}% of the training time ({cost.seconds:.2f} s of "
            f"{cost.training_seconds:.2f} s, {windows}): measured as {HOW_MEASURED}.")
    if cost.over_budget and cost.max_overhead is not None:
        first = cost.first_window_seconds
        here = f" ({first:.2f} s here{_parts(cost)})" if first is not None else ""
        text += (f" That is above max_overhead ({100 * cost.max_overhead:g}%): the first window is recorded"
                 f" whatever it costs{here}, since nothing is known of a window's cost before one ran, and"
                 " this run was too short to absorb it; the windows after it waited for the budget.")
        if first:
            text += (f" A run of {first / cost.max_overhead:.0f} s of training or more holds such a window within"
                     f" max_overhead (this one trained {cost.training_seconds:.0f} s).")
    elif cost.max_overhead is not None:
        text += f" Within max_overhead ({100 * cost.max_overhead:g}%)."
    else:
        text += (" No budget in this run (max_overhead=None): its windows fall where the schedule puts them; the"
                 " default, max_overhead=\"auto\", moves them so that profiling stays within 1% of the training time"
                 " (2% with record_shapes, profile_memory or with_stack).")
    if cost.end_seconds is not None and cost.end_seconds >= 0.005:
        text += (f" The end of the stage took {cost.end_seconds:.2f} s more for the last window's export and"
                 " the report.")
    return text


def _parts(cost: ProfilingCost) -> str:
    """``: 0.21 s in Kineto's set-up, start and stop, ...`` for the first window, where known."""
    parts = cost.first_window_parts
    if not parts:
        return ""
    said = [f"{parts[k]:.2f} s {words}" for k, words in _PARTS.items() if parts.get(k, 0.0) >= 0.005]
    return ": " + ", ".join(said) if said else ""
