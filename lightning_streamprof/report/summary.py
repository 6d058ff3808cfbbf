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
    windows: Sequence[Window], rank: int = 0, overhead: float | None = None, row_limit: int = 10,
    total: int | None = None, shown: int = 3,
) -> str:
    """A short table of top operators for each of the last ``shown`` windows, plain text (no colour codes);
    ``total`` windows were written in all (the rest are counted, so the text stays short)."""
    out, buf = console(120)
    total = len(windows) if total is None else total
    head = f"StreamProfiler: {total} window(s) on rank {rank}"
    if overhead is not None:
        head += f", measured profiling cost {overhead:.2f} s"
    out.print(head)
    latest = sorted(windows, key=lambda r: r.window)[-shown:]
    if total > len(latest) and latest:
        out.print(f"(the last {len(latest)} shown; `streamprof analyze` on the run's directory reads them all)")
    for res in latest:
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
