"""Plain-text tables and headline lines of a result (the top rows are cut here, in the renderer).

Times are in milliseconds everywhere, with the unit in each header; a column empty in every shown row is left
out; paths are printed on lines of their own and never wrapped (copy them whole).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from lightning_streamprof.escape import for_terminal
from lightning_streamprof.report.devices import device_note
from lightning_streamprof.report.findings import Finding
from lightning_streamprof.report.units import ms_text, pct_text
from lightning_streamprof.results import Result

Column = tuple[str, Callable[[Any], Any]]
NAME_WIDTH = 72
#: the name column keeps at least this width however many columns follow
NAME_MIN_WIDTH = 24


def console(width: int) -> tuple[Console, io.StringIO]:
    """A plain-text console (no colour codes) writing to a buffer."""
    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None, force_terminal=False), buf


def plain(out: Console, text: str) -> None:
    """Print ``text`` as it is: no markup, no highlighting, never wrapped (paths stay whole); control characters
    within each of its lines are written as visible escapes (see :func:`lightning_streamprof.escape.for_terminal`)."""
    out.print("\n".join(map(for_terminal, text.split("\n"))), markup=False, highlight=False, soft_wrap=True)


def table(title: str | None, columns: Sequence[Column], rows: Sequence[Any], top: int) -> Table | None:
    """The first ``top`` rows with one column per ``(header, getter)``, leaving out columns empty in every row;
    None without rows."""
    rows = list(rows[:top])
    if not rows:
        return None
    cells = [[_cell(get(row)) for _, get in columns] for row in rows]
    keep = [i for i in range(len(columns)) if any(c[i] for c in cells)]
    out = Table(title=title, title_justify="left")
    for i in keep:
        out.add_column(columns[i][0], justify="left" if i == 0 else "right", overflow="fold",
                       no_wrap=i != 0, min_width=NAME_MIN_WIDTH if i == 0 else None)
    for c in cells:
        out.add_row(*(c[i] for i in keep))
    return out


def _cell(value: Any, width: int = NAME_WIDTH) -> Text:
    """A cell as plain text: names from traces are never read as markup, their control characters escaped."""
    if value is None:
        return Text("")
    text = for_terminal(value) if isinstance(value, str) else f"{value:.4g}" if isinstance(value, float) else str(value)
    return Text(text if len(text) <= width else text[: width - 1] + "…")


def headline_lines(result: Result) -> list[str]:
    """GPU metrics and the mean step breakdown (ms) of a result."""
    lines = []
    several = len(result.traces) > 1
    for gpu in result.gpu:
        where = f"rank {gpu.rank} window {gpu.window} cuda:{gpu.device}" if several else f"cuda:{gpu.device}"
        lines.append(
            f"  {where}: GPU utilization {pct_text(gpu.utilization)}, Est. SM efficiency {pct_text(gpu.sm_efficiency)},"
            f" Est. achieved occupancy {pct_text(gpu.achieved_occupancy)}"
        )
        note = device_note(gpu)
        if note:
            lines.append(f"    {note}")
    steps = result.steps
    if steps.count:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in steps.breakdown_ms.items() if v >= 0.005)
        lines.append(f"  step {steps.mean_ms:.2f} ms (mean of {steps.count}), in ms: {parts}")
    return lines


def finding_lines(found: Sequence[Finding]) -> list[str]:
    """One line per kind of recommendation, then the evidence of each trace that has it (trace text escaped)."""
    lines = []
    for f in found:
        lines.append(f"  -> [{f.id}] {for_terminal(f.message)}")
        lines += [f"       {for_terminal(label)}: {for_terminal(line)}" for label, line in f.per_trace]
    return lines


OPERATOR_COLUMNS: tuple[Column, ...] = (
    ("operator", lambda o: o.name), ("calls", lambda o: o.calls), ("host self (ms)", lambda o: ms_text(o.host_self_ns)),
    ("host total (ms)", lambda o: ms_text(o.host_total_ns)),
    ("device self (ms)", lambda o: ms_text(o.device_self_ns) if o.device_self_ns else None),
)
