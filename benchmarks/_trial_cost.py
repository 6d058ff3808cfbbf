"""What ``mode="auto"``'s trials cost a run, measured inside that run (free of the host's drift between runs): the
time its steps in trials took beyond the run's typical step outside them, as a share of the run's timed time.

Whole runs of auto against ``mode="on"`` differ by the trials' cost and by the host's drift between the runs (±10%
on the H200); this part is the first alone. The typical step is the median of the steps outside the trials, so a
stall elsewhere in the run does not move it.
"""

from __future__ import annotations

import statistics


def trial_share(durations: list[float], in_trials: list[bool], first: int) -> float | None:
    """``sum(d - typical)`` over the steps from ``first`` on flagged in ``in_trials``, over ``sum(d)`` of all the
    steps from ``first`` on; ``typical``: the median of the unflagged ones. ``durations[i]`` is batch ``i``'s. None
    when no timed step was in trials (nothing to measure: auto ran none, or the pipeline was off) or none outside."""
    timed = list(zip(durations[first:], in_trials[first:]))
    outside = [d for d, flagged in timed if not flagged]
    if not outside or len(outside) == len(timed):
        return None
    typical = statistics.median(outside)
    total = sum(d for d, _ in timed)
    return sum(d - typical for d, flagged in timed if flagged) / total if total > 0 else None
