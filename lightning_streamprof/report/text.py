"""Terminal report of a result (``streamprof analyze``), plain text."""

from __future__ import annotations

from lightning_streamprof.escape import for_terminal
from lightning_streamprof.report.tables import OPERATOR_COLUMNS, console, headline_lines, ms, pct, table
from lightning_streamprof.results import Result

_KERNELS = (
    ("kernel", lambda k: k.name), ("calls", lambda k: k.calls), ("total ms", lambda k: ms(k.total_ns)),
    ("mean µs", lambda k: f"{k.mean_ns / 1e3:.1f}"), ("blocks/SM", lambda k: k.blocks_per_sm),
    ("occupancy", lambda k: pct(k.occupancy)), ("Tensor Cores", lambda k: "yes" if k.tensor_cores else ""),
)
_OPERATORS = (*OPERATOR_COLUMNS, ("device total ms", lambda o: ms(o.device_total_ns)))
_SOURCE = (
    ("line", lambda s: s.location), ("function", lambda s: s.function),
    ("host self ms", lambda s: ms(s.host_self_ns)), ("device self ms", lambda s: ms(s.device_self_ns)),
    ("share", lambda s: pct(s.share)),
)
_MEMORY = (
    ("operator", lambda m: m.name), ("device", lambda m: m.device), ("calls", lambda m: m.calls),
    ("allocated MiB", lambda m: f"{m.allocation_bytes / 2**20:.2f}"),
    ("increase MiB", lambda m: f"{m.increase_bytes / 2**20:.2f}"),
    ("self increase MiB", lambda m: f"{m.self_increase_bytes / 2**20:.2f}"),
)


def render_analysis(result: Result, top: int = 10) -> str:
    """Headline metrics, step breakdown, recommendations, then the top rows of each table."""
    out, buf = console(140)
    traces = result.traces
    head = f"run {result.run}: " if result.run else ""
    out.print(for_terminal(head + (f"{len(traces)} traces" if len(traces) != 1 else traces[0].path)), markup=False,
              highlight=False)
    for line in headline_lines(result):
        out.print(line, markup=False, highlight=False)
    for device in result.memory.devices:
        where = f"rank {device.rank} window {device.window} {device.device}" if len(traces) > 1 else device.device
        out.print(f"  memory {for_terminal(where)}: peak allocated {device.peak_allocated_bytes / 2**20:.1f} MiB",
                  markup=False, highlight=False)
    for title, columns, rows in (("Kernels", _KERNELS, result.kernels), ("Operators", _OPERATORS, result.operators),
                                 ("Hot source lines", _SOURCE, result.source_lines),
                                 ("Memory by operator", _MEMORY, result.memory.operators)):
        rendered = table(title, columns, rows, top)
        if rendered is not None:
            out.print(rendered)
    return buf.getvalue().rstrip()
