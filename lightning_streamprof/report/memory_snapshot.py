"""The memory snapshots of a run's windows in the HTML report: the allocated and reserved curve of each, and the
largest live allocations at its peak by the line of code that made them."""

from __future__ import annotations

from collections.abc import Sequence

from lightning_streamprof.escape import for_html
from lightning_streamprof.report import svg
from lightning_streamprof.report.page import note, table
from lightning_streamprof.report.units import mib
from lightning_streamprof.results.memory_snapshot import SnapshotMemory

#: snapshots drawn (the latest windows')
CHARTS = 8


def snapshots_html(snapshots: Sequence[SnapshotMemory]) -> str:
    """A curve and a table per snapshot (empty without any)."""
    if not snapshots:
        return ""
    shown = sorted(snapshots, key=lambda m: (m.window or 0, m.rank or 0, m.device))[-CHARTS:]
    parts = ["<h3>Memory snapshots (the CUDA allocator's history)</h3>",
             note("From each window's rank<R>.memory_snapshot.pickle beside its trace (pytorch.org/memory_viz opens "
                  "it): allocated and reserved memory over the window's steps, and the largest live allocations at "
                  "the peak by the line that made them. Allocations count the bytes asked for; the allocator rounds "
                  "each up to its block (torch.cuda.max_memory_allocated counts blocks, a little more).")]
    columns = [("line", lambda r: r.location), ("function", lambda r: r.function),
               ("size (MiB)", lambda r: mib(r.bytes)), ("count", lambda r: r.count or None)]
    keys = ["allocated MiB", "reserved MiB"]
    colors = dict(zip(keys, (svg.color("kernel"), svg.color("memcpy"))))
    parts.append(svg.legend(keys, colors=colors))
    for m in shown:
        series = [svg.Series("allocated MiB", [(t / 1e3, mib(a)) for t, a, _ in m.curve], colors[keys[0]]),
                  svg.Series("reserved MiB", [(t / 1e3, mib(r)) for t, _, r in m.curve], colors[keys[1]], dashed=True)]
        where = " ".join(x for x in (f"window {m.window}" if m.window is not None else "",
                                     f"rank {m.rank}" if m.rank is not None else "", f"cuda:{m.device}") if x)
        parts.append(f"<figure>{svg.line_chart(series, 'ms since the history started', 'MiB')}<figcaption>"
                     f"{for_html(where)}: peak allocated {mib(m.peak_allocated):,.1f} MiB{_blocks(m)}, reserved "
                     f"{mib(m.peak_reserved):,.1f} MiB, at {m.peak_us / 1e3:.1f} ms</figcaption></figure>")
        parts.append(f"<p>{for_html(where)}: the largest live allocations at the peak</p>"
                     + table(columns, m.at_peak, name_cols=2))
    return "".join(parts)


def _blocks(m: SnapshotMemory) -> str:
    """The allocator's own peak beside the snapshot's, where the recording process kept it."""
    if m.blocks_peak is None:
        return ""
    return f" ({mib(m.blocks_peak):,.1f} MiB in the allocator's blocks, torch.cuda.max_memory_allocated)"
