"""Terminal text for the profiler's summary."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from lightning_streamprof.analysis.operators import top_operators
from lightning_streamprof.trace.reader import TraceFormatError, read_trace

if TYPE_CHECKING:
    from lightning_streamprof.exporter import WindowResult


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def headline_lines(analysis: dict[str, Any]) -> list[str]:
    """GPU metrics, the mean step breakdown and the recommendations of one analysed window."""
    lines = []
    for gpu in analysis.get("gpu") or []:
        lines.append(
            f"  cuda:{gpu['device']}: GPU utilization {_pct(gpu.get('utilization'))}, "
            f"Est. SM efficiency {_pct(gpu.get('sm_efficiency'))}, "
            f"Est. achieved occupancy {_pct(gpu.get('achieved_occupancy'))}"
        )
    steps = analysis.get("steps") or {}
    if steps.get("count"):
        parts = ", ".join(f"{k} {v:.2f}" for k, v in (steps.get("breakdown_ms") or {}).items() if v >= 0.005)
        lines.append(f"  step {steps['mean_ms']:.2f} ms (mean of {steps['count']}): {parts}")
    for rec in analysis.get("recommendations") or []:
        lines.append(f"  -> {rec['message']}")
    return lines


def render_windows(
    results: list[WindowResult], rank: int = 0, overhead: float | None = None, row_limit: int = 10
) -> str:
    """One short table of top operators per window, plain text (no colour codes).

    The traces are read back here, at the end of a stage, so no parsing competes with training."""
    buf = io.StringIO()
    console = Console(file=buf, width=120, color_system=None, force_terminal=False)
    head = f"StreamProfiler: {len(results)} window(s) on rank {rank}"
    if overhead is not None:
        head += f", measured profiling cost {overhead:.2f} s"
    console.print(head)
    for res in sorted(results, key=lambda r: r.window):
        title = f"window {res.window}: steps {res.first_step}-{res.last_step}\n{res.path}"
        try:
            trace = read_trace(res.path)
        except TraceFormatError as err:
            console.print(f"{title}\n  trace unavailable: {err}")
            continue
        console.print(f"{title} ({len(trace)} events)")
        for line in headline_lines(res.analysis or {}):
            console.print(line, markup=False, highlight=False)
        table = Table()
        for col in ("operator", "calls", "host self ms", "host total ms", "device self ms"):
            table.add_column(col, justify="left" if col == "operator" else "right", overflow="fold")
        for op in top_operators(trace, limit=row_limit):
            table.add_row(op.name, str(op.calls), _ms(op.host_self_ns), _ms(op.host_total_ns), _ms(op.device_self_ns))
        console.print(table)
    return buf.getvalue().rstrip()
