"""Terminal report of an analysis result (the JSON contract), plain text."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table

from lightning_streamprof.report.summary import headline_lines


def _cell(value: Any, width: int = 64) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return ""
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(title: str, rows: list[dict[str, Any]], top: int) -> Table | None:
    rows = [r for r in rows if isinstance(r, dict)][:top]
    if not rows:
        return None
    columns = [k for k, v in rows[0].items() if not isinstance(v, (dict, list))]
    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, justify="left" if isinstance(rows[0][col], str) else "right", overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    return table


def render_analysis(result: dict[str, Any], top: int = 10) -> str:
    """Headline metrics, step breakdown, recommendations, then the top rows of each table."""
    buf = io.StringIO()
    console = Console(file=buf, width=140, color_system=None, force_terminal=False)
    traces = result.get("traces")
    if isinstance(traces, list):
        console.print(f"{len(traces)} traces")
    elif isinstance(result.get("trace"), dict):
        console.print(result["trace"].get("path", ""))
    for line in headline_lines(result):
        console.print(line, markup=False, highlight=False)
    memory = result.get("memory") or {}
    for device in memory.get("devices", []) if isinstance(memory, dict) else []:
        if isinstance(device, dict) and "peak_allocated_bytes" in device:
            console.print(f"  memory {device.get('device')}: peak allocated {device['peak_allocated_bytes'] / 2**20:.1f} MiB")
    for key, title in (("kernels", "Kernels"), ("operators", "Operators"), ("source_lines", "Hot source lines")):
        table = _table(title, result.get(key) or [], top)
        if table is not None:
            console.print(table)
    if isinstance(memory, dict):
        table = _table("Memory by operator", memory.get("operators") or [], top)
        if table is not None:
            console.print(table)
    return buf.getvalue().rstrip()
