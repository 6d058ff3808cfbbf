"""Terminal text for the profiler's summary."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from lightning_streamprof.exporter import WindowResult


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def render_windows(results: list[WindowResult], rank: int = 0, overhead: float | None = None) -> str:
    """One short table of top operators per window, plain text (no colour codes)."""
    buf = io.StringIO()
    console = Console(file=buf, width=120, color_system=None, force_terminal=False)
    head = f"StreamProfiler: {len(results)} window(s) on rank {rank}"
    if overhead is not None:
        head += f", measured profiling cost {overhead:.2f} s"
    console.print(head)
    for res in sorted(results, key=lambda r: r.window):
        table = Table(
            title=f"window {res.window}: steps {res.first_step}-{res.last_step}, {res.events} events\n{res.path}",
            title_justify="left",
        )
        for col in ("operator", "calls", "host self ms", "host total ms", "device self ms"):
            table.add_column(col, justify="left" if col == "operator" else "right", overflow="fold")
        for op in res.top_operators:
            table.add_row(op.name, str(op.calls), _ms(op.host_self_ns), _ms(op.host_total_ns), _ms(op.device_self_ns))
        console.print(table)
    return buf.getvalue().rstrip()
