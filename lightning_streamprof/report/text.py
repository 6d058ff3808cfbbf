"""Terminal report of a result (``streamprof analyze``), plain text, times in ms."""

from __future__ import annotations

from collections.abc import Sequence

from lightning_streamprof.report.findings import findings
from lightning_streamprof.report.tables import (
    OPERATOR_COLUMNS,
    console,
    finding_lines,
    headline_lines,
    ms,
    pct,
    plain,
    table,
)
from lightning_streamprof.results import Result, WindowResults

_KERNELS = (
    ("kernel", lambda k: k.name), ("calls", lambda k: k.calls), ("total (ms)", lambda k: ms(k.total_ns)),
    ("mean (ms)", lambda k: ms(k.mean_ns)), ("max (ms)", lambda k: ms(k.max_ns)),
    ("blocks per SM", lambda k: k.blocks_per_sm),
    ("occupancy", lambda k: None if k.occupancy is None else pct(k.occupancy)),
    ("Tensor Cores", lambda k: "yes" if k.tensor_cores else None),
)
_OPERATORS = (*OPERATOR_COLUMNS, ("device total (ms)", lambda o: ms(o.device_total_ns) if o.device_total_ns else None))
_MEMORY = (
    ("operator", lambda m: m.name), ("device", lambda m: m.device), ("calls", lambda m: m.calls),
    ("allocated (MiB)", lambda m: f"{m.allocation_bytes / 2**20:.2f}"),
    ("size increase (MiB)", lambda m: f"{m.increase_bytes / 2**20:.2f}"),
    ("self increase (MiB)", lambda m: f"{m.self_increase_bytes / 2**20:.2f}"),
)


def render_analysis(result: Result, top: int = 10, windows: Sequence[WindowResults] = ()) -> str:
    """Headline metrics, step breakdown, recommendations (one per kind, with each trace's evidence from
    ``windows``), then the top rows of each table; source lines and paths on lines of their own."""
    out, buf = console(140)
    traces = result.traces
    head = f"run {result.run}: " if result.run else ""
    plain(out, head + (f"{len(traces)} traces" if len(traces) != 1 else traces[0].path))
    for line in headline_lines(result):
        plain(out, line)
    for device in result.memory.devices:
        where = f"rank {device.rank} window {device.window} {device.device}" if len(traces) > 1 else device.device
        plain(out, f"  memory {where}: peak allocated {device.peak_allocated_bytes / 2**20:.1f} MiB")
    for line in finding_lines(findings(result, windows)):
        plain(out, line)
    for title, columns, rows in (("Kernels", _KERNELS, result.kernels), ("Operators", _OPERATORS, result.operators),
                                 ("Memory by operator", _MEMORY, result.memory.operators)):
        rendered = table(title, columns, rows, top)
        if rendered is not None:
            out.print(rendered)
    if result.source_lines:
        plain(out, "Hot source lines (share of operator self time, host self ms, device self ms, line, function)")
        for s in result.source_lines[:top]:
            plain(out, f"  {pct(s.share):>6}  {ms(s.host_self_ns):>9}  {ms(s.device_self_ns):>9}  {s.location} "
                       f"({s.function})")
    return buf.getvalue().rstrip()
