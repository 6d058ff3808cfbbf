"""Terminal report of a result (``streamprof analyze``), plain text, times in ms."""

from __future__ import annotations

from collections.abc import Sequence

from lightning_streamprof import names
from lightning_streamprof.escape import for_terminal
from lightning_streamprof.report.findings import findings
from lightning_streamprof.report.tables import (
    OPERATOR_COLUMNS,
    console,
    finding_lines,
    headline_lines,
    plain,
    table,
)
from lightning_streamprof.report.distributed import collectives_by_kind
from lightning_streamprof.report.hta_sections import hook_sentence, render_text as render_hta
from lightning_streamprof.report.units import mib_text, ms_text, pct_text
from lightning_streamprof.results import DistributedStats, Result, WindowResults, rank_ranges
from lightning_streamprof.words import counted


_KERNELS = (
    ("kernel", lambda k: k.name), ("calls", lambda k: k.calls), ("total (ms)", lambda k: ms_text(k.total_ns)),
    ("mean (ms)", lambda k: ms_text(k.mean_ns)), ("max (ms)", lambda k: ms_text(k.max_ns)),
    ("blocks per SM", lambda k: k.blocks_per_sm),
    ("occupancy", lambda k: None if k.occupancy is None else pct_text(k.occupancy)),
    ("Tensor Cores", lambda k: "yes" if k.tensor_cores else None),
)
_OPERATORS = (*OPERATOR_COLUMNS,
              ("device total (ms)", lambda o: ms_text(o.device_total_ns) if o.device_total_ns else None))
_MEMORY = (
    ("operator", lambda m: m.name), ("device", lambda m: m.device), ("calls", lambda m: m.calls),
    ("allocated (MiB)", lambda m: mib_text(m.allocation_bytes, 2)),
    ("size increase (MiB)", lambda m: mib_text(m.increase_bytes, 2)),
    ("self increase (MiB)", lambda m: mib_text(m.self_increase_bytes, 2)),
)
_RANKS = (
    ("rank", lambda r: r.rank), ("host", lambda r: r.host), ("step ms", lambda r: f"{r.step_ms:.2f}"),
    ("computation", lambda r: f"{r.computation_ms:.2f}"), ("overlap", lambda r: f"{r.overlap_ms:.2f}"),
    ("communication", lambda r: f"{r.communication_ms:.2f}"), ("other", lambda r: f"{r.other_ms:.2f}"),
    ("sync", lambda r: f"{r.sync_ms:.2f}"), ("transfer", lambda r: f"{r.transfer_ms:.2f}"),
    ("dataloader", lambda r: f"{r.dataloader_ms:.2f}"), ("score", lambda r: f"{r.relative_score:.2f}"),
    ("straggler", lambda r: "yes" if r.straggler else ""),
)
_COMM_OPS = (
    ("rank", lambda o: o.rank), ("collective", lambda o: o.name), ("calls", lambda o: o.calls),
    ("total MB", lambda o: "" if o.total_bytes is None else f"{o.total_bytes / 1e6:.3f}"),
    ("mean KB", lambda o: "" if o.mean_bytes is None else f"{o.mean_bytes / 1e3:.1f}"),
    ("total ms", lambda o: ms_text(o.total_ns)), ("mean ms", lambda o: ms_text(o.mean_ns)),
    ("transfer ms", lambda o: ms_text(o.transfer_ns)), ("mean transfer ms", lambda o: ms_text(o.mean_transfer_ns)),
    ("hidden ms", lambda o: None if o.hidden_ns is None else ms_text(o.hidden_ns)),
    ("exposed ms", lambda o: None if o.exposed_ns is None else ms_text(o.exposed_ns)),
)
_KINDS = (
    ("rank", lambda k: k["rank"]), ("kind", lambda k: k["kind"]), ("calls", lambda k: k["calls"]),
    ("total ms", lambda k: ms_text(k["total_ns"])), ("hidden ms", lambda k: None if k["hidden_ns"] is None else
                                                  ms_text(k["hidden_ns"])),
    ("exposed ms", lambda k: None if k["hidden_ns"] is None else ms_text(k["total_ns"] - k["hidden_ns"])),
    ("transfer ms", lambda k: ms_text(k["transfer_ns"])),
)


def render_distributed(stats: DistributedStats, top: int = 10) -> str:
    """Per-rank table (ms per step), the straggler sentence and the communication-ops table."""
    out, buf = console(140)
    windows = {w.window for w in stats.windows}
    where = f"window {next(iter(windows))}" if len(windows) == 1 and None not in windows else counted(len(windows), "window")
    out.print(f"Distributed ({where}, {len(stats.ranks)} of {stats.world_size or len(stats.ranks)} ranks; ms per step)",
              markup=False, highlight=False)
    rendered = table(None, _RANKS, stats.ranks, max(top, len(stats.ranks)) if len(stats.ranks) <= 64 else top)
    if rendered is not None:
        out.print(rendered)
    plain(out, f"  -> {for_terminal(stats.message)}" if stats.message else
          f"  no straggler (every relative score >= {stats.threshold:g})")
    if stats.missing_ranks:
        out.print(f"  missing ranks: {rank_ranges(stats.missing_ranks)}", markup=False, highlight=False)
    kinds = collectives_by_kind(stats)
    if len({k["kind"] for k in kinds}) > 1 or any(k["kind"] in ("all_gather", "reduce_scatter") for k in kinds):
        rendered = table("Collectives by kind (hidden: overlapped by computation; exposed: the rest)", _KINDS, kinds,
                         max(top, 2 * len(stats.ranks)) if len(stats.ranks) <= 16 else top)
        if rendered is not None:
            out.print(rendered)
    rendered = table("Communication ops", _COMM_OPS, stats.comm_ops, top)
    if rendered is not None:
        out.print(rendered)
    return buf.getvalue().rstrip()


def _run_details(result: Result) -> str:
    """`` (Classifier; 3 windows from step 12)``: what tells one run from another beside its timestamped name."""
    found = (names.LIGHTNING_MODULE_CLASS.match(n) for n in result.pipeline.hook_names)
    modules = sorted({m.group(1) for m in found if m})
    firsts = {(t.window, t.first_step) for t in result.traces if t.window is not None}
    parts = [", ".join(modules)] if modules else []
    if firsts:
        parts.append(f"{counted(len(firsts), 'window')} from step {min(step or 0 for _, step in firsts)}")
    return f" ({'; '.join(parts)})" if parts else ""


def render_analysis(result: Result, top: int = 10, windows: Sequence[WindowResults] = ()) -> str:
    """Headline metrics, step breakdown, recommendations (one per kind, with each trace's evidence from
    ``windows``), then the top rows of each table; source lines and paths on lines of their own."""
    out, buf = console(140)
    traces = result.traces
    head = f"run {result.run}{_run_details(result)}: " if result.run else ""
    plain(out, for_terminal(head + (f"{len(traces)} traces" if len(traces) != 1 else traces[0].path)))
    for line in headline_lines(result):
        plain(out, line)
    for device in result.memory.devices:
        where = f"rank {device.rank} window {device.window} {device.device}" if len(traces) > 1 else device.device
        plain(out, f"  memory {for_terminal(where)}: peak allocated {mib_text(device.peak_allocated_bytes)} MiB")
    sentence = hook_sentence(result)
    if sentence:
        plain(out, f"  {sentence}")
    for line in finding_lines(findings(result, windows)):
        plain(out, line)
    if result.distributed is not None:
        plain(out, render_distributed(result.distributed, top))
    for title, columns, rows in (("Kernels", _KERNELS, result.kernels), ("Operators", _OPERATORS, result.operators),
                                 ("Memory by operator", _MEMORY, result.memory.operators)):
        rendered = table(title, columns, rows, top)
        if rendered is not None:
            out.print(rendered)
    if result.source_lines:
        plain(out, "Hot source lines (share of operator self time, host self ms, device self ms, line, function)")
        for s in result.source_lines[:top]:
            plain(out, f"  {pct_text(s.share):>6}  {ms_text(s.host_self_ns):>9}  {ms_text(s.device_self_ns):>9}  "
                       f"{for_terminal(s.location)} ({for_terminal(s.function)})")
    hta = render_hta(result, top)
    if hta:
        plain(out, hta)
    return buf.getvalue().rstrip()
