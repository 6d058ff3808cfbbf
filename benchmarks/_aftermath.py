"""Whether a profiler window slows the steps that follow it, measured inside one run (free of the host's drift
between runs): the median step after a window placed at the middle of the run against the median step before it,
and the same positions of a run without the window as the control.

A window's own steps and its export are charged by the profiler's budget; what this measures is what they leave
behind (CUPTI still attached, a thread that holds the GIL, a graph captured while Kineto records), which the budget
cannot see because it compares each window with the steps around it.
"""

from __future__ import annotations

import statistics

GAP = 50  # steps after the window's start left out of "after": the window, its export and analysis
SPAN = 300  # steps on each side, at most


def late_start(steps: int) -> int:
    """The step at which the late window starts in a run of ``steps`` steps: its middle."""
    return steps // 2


def after_before(durations: list[float], steps: int, first: int, watched: list[bool] | None = None) -> dict | None:
    """The median of the step durations after ``late_start(steps) + GAP`` over the median of those before
    ``late_start(steps)`` (from ``first`` on), ``SPAN`` steps each at most; steps flagged in ``watched`` (a window
    or its export still running) are left out of both. ``durations[i]`` is batch ``i``'s. None when either side
    has fewer than 20 steps."""
    start = late_start(steps)
    span = min(SPAN, start - first, len(durations) - start - GAP)
    if span < 20:
        return None
    flags = watched or [False] * len(durations)
    before = [d for d, w in zip(durations[start - span:start], flags[start - span:start]) if not w]
    after = [d for d, w in zip(durations[start + GAP:start + GAP + span], flags[start + GAP:start + GAP + span])
             if not w]
    if len(before) < 20 or len(after) < 20:
        return None
    return {"ratio": statistics.median(after) / statistics.median(before), "span": span,
            "after_watched": sum(flags[start + GAP:start + GAP + span])}


def lingering(late: list[dict | None], control: list[dict | None]) -> list[float]:
    """Per round, the late-window run's after/before ratio over the control run's at the same positions (above 1:
    the steps after the window ran slower than the window's absence explains)."""
    return [a["ratio"] / b["ratio"] for a, b in zip(late, control) if a and b]


def swapped_blocks(durations: list[float], first_profiler: list[bool], first: int) -> dict | None:
    """Blocks of steps run alternately under two profilers (``first_profiler[i]``: batch ``i`` ran under the
    first): per pair of adjacent blocks from ``first`` on, the first's median step over the other's; their median and
    the pairs' count. None without two whole blocks of each."""
    blocks: list[tuple[bool, list[float]]] = []
    for d, flag in zip(durations[first:], first_profiler[first:]):
        if not blocks or blocks[-1][0] != flag:
            blocks.append((flag, []))
        blocks[-1][1].append(d)
    blocks = blocks[1:-1]  # the first and the last may be cut short
    pairs = [(a, b) if fa else (b, a) for (fa, a), (_, b) in zip(blocks[::2], blocks[1::2])]
    if len(pairs) < 2:
        return None
    ratios = [statistics.median(a) / statistics.median(b) for a, b in pairs]
    return {"ratio": statistics.median(ratios), "pairs": len(pairs), "ratios": [round(r, 4) for r in ratios]}
