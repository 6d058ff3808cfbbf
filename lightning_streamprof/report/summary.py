"""Terminal text for the profiler's summary: the analysed windows' results, never their traces."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from lightning_streamprof.report.tables import OPERATOR_COLUMNS, console, headline_lines, table
from lightning_streamprof.results import Result


class Window(Protocol):
    """What the summary reads of an exported window."""

    window: int
    first_step: int
    last_step: int
    path: str
    analysis: Result | None


def render_windows(
    windows: Sequence[Window], rank: int = 0, overhead: float | None = None, row_limit: int = 10
) -> str:
    """One short table of top operators per window, plain text (no colour codes)."""
    out, buf = console(120)
    head = f"StreamProfiler: {len(windows)} window(s) on rank {rank}"
    if overhead is not None:
        head += f", measured profiling cost {overhead:.2f} s"
    out.print(head)
    for res in sorted(windows, key=lambda r: r.window):
        out.print(f"window {res.window}: steps {res.first_step}-{res.last_step}\n{res.path}", markup=False,
                  highlight=False)
        if res.analysis is None:
            out.print("  not analysed")
            continue
        for line in headline_lines(res.analysis):
            out.print(line, markup=False, highlight=False)
        rendered = table(None, OPERATOR_COLUMNS, res.analysis.operators, row_limit)
        if rendered is not None:
            out.print(rendered)
    return buf.getvalue().rstrip()
