"""HTA's analyses as report sections (terminal and HTML read the same blocks): GPU time per Lightning hook and per
``record_function`` range, idle time per stream, kernel launches, the launch queue, copy bandwidth, the critical path
and frequent kernel sequences.

A section with no data is one line saying so, or nothing where the traces cannot have it; a measure the traces do
not have is an empty cell, never 0. Times are milliseconds, as in the rest of the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_streamprof.escape import for_html
from lightning_streamprof.names import hook_label, is_lightning_hook
from lightning_streamprof.report import page
from lightning_streamprof.report.tables import console, plain, table
from lightning_streamprof.report.units import ms, pct_text
from lightning_streamprof.results import Result
from lightning_streamprof.results.hta import CRITICAL_CATEGORIES, AnnotationTime, AnnotationTimes, HtaAnalyses

Column = tuple[str, Callable[[Any], Any]]
#: hooks the summary sentence names
SENTENCE_HOOKS = 3


@dataclass(frozen=True)
class Block:
    """One table of a section, with the lines said before it."""

    notes: list[str]
    columns: Sequence[Column] = ()
    rows: Sequence[Any] = ()
    title: str | None = None


@dataclass(frozen=True)
class Section:
    anchor: str
    heading: str
    blocks: list[Block] = field(default_factory=list)


def _ms(ns: float | None) -> float | None:
    return None if ns is None else round(ms(ns), 3)


def _num(v: float | None) -> str | None:
    """A measure in 3 significant digits (small copies' GB/s and sizes are not 0), None where unknown."""
    if v is None:
        return None
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def _per_step(ns: float, steps: int) -> float:
    return ns / steps if steps else ns


# ------------------------------------------------------------------------------------------------------- hooks
def hook_rows(hooks: AnnotationTimes) -> list[AnnotationTime]:
    """The hooks that took host or GPU time, most GPU time of their own first."""
    rows = [r for r in hooks.rows if r.host_ns or r.kernel_ns or r.device_ns]
    return sorted(rows, key=lambda r: (-r.self_kernel_ns, -r.kernel_ns, -r.host_ns, r.name))


def hook_sentence(result: Result, top: int = SENTENCE_HOOKS) -> str | None:
    """``GPU time per step by Lightning hook: training_step 8.1 ms (of 9.6 ms of kernels), optimizer_step 1.2 ms,
    ...`` (each hook's own kernels, nested hooks excluded); None without hook ranges or kernels launched in them."""
    hta = result.hta
    if hta is None:
        return None
    hooks = hta.hooks
    shown = [r for r in hook_rows(hooks) if r.self_kernel_ns > 0][:top]
    if not shown or hooks.kernel_ns <= 0:
        return None
    steps = result.steps.count
    bare = [hook_label(r.name, kind=False) for r in shown]
    labels = [b if bare.count(b) == 1 else hook_label(r.name) for b, r in zip(bare, shown)]
    parts = [f"{label} {ms(_per_step(r.self_kernel_ns, steps)):.2f} ms" for label, r in zip(labels, shown)]
    parts[0] += f" (of {ms(_per_step(hooks.kernel_ns, steps)):.2f} ms of kernels)"
    where = "per step" if steps else "in the trace"
    return f"GPU time {where} by Lightning hook: " + ", ".join(parts)


def _hooks(result: Result, hta: HtaAnalyses) -> list[Block]:
    hooks, steps = hta.hooks, max(result.steps.count, 1)
    rows = hook_rows(hooks)
    if not rows:
        return [Block(["No Lightning hook ranges in the traces (StreamProfiler and Lightning's PyTorchProfiler record "
                       "them)."])]
    base = [("hook", lambda r: hook_label(r.name)), ("calls", lambda r: r.calls),
            ("host (ms)", lambda r: _ms(r.host_ns))]
    if hooks.device_ns <= 0:
        return [Block(["No device work in the traces: the hooks' host time only."], base, rows)]
    unlinked = max(hooks.kernel_ns - sum(r.self_kernel_ns for r in hooks.rows) - hooks.outside_kernel_ns, 0)
    notes = [s for s in (hook_sentence(result),) if s]
    notes.append(f"Each hook's GPU time is that of the kernels launched inside it (correlation ids: CUDA-graph "
                 f"replays and side streams included), nested hooks excluded; outside every hook "
                 f"{ms(hooks.outside_kernel_ns):.3f} ms, kernels without a launch in the trace {ms(unlinked):.3f} ms, "
                 f"of {ms(hooks.kernel_ns):.3f} ms of kernels.")
    columns = [
        *base, ("GPU (ms)", lambda r: _ms(r.self_kernel_ns)),
        ("GPU per step (ms)", lambda r: _ms(r.self_kernel_ns / steps)),
        ("GPU with nested hooks (ms)", lambda r: _ms(r.kernel_ns)),
        ("device incl. copies (ms)", lambda r: _ms(r.device_ns) if r.device_ns != r.kernel_ns else None),
        ("kernels", lambda r: r.kernels),
    ]
    return [Block(notes, columns, rows)]


def _ranges(hta: HtaAnalyses) -> list[Block]:
    rows = [r for r in hta.annotations.rows if not is_lightning_hook(r.name) and (r.device_ns or r.gpu_span_calls)]
    if not rows:
        return []
    spans = any(r.gpu_span_calls for r in rows)
    columns = [
        ("range", lambda r: r.name), ("calls", lambda r: r.calls), ("host (ms)", lambda r: _ms(r.host_ns)),
        ("device launched inside (ms)", lambda r: _ms(r.device_ns)),
        ("device, innermost range (ms)", lambda r: _ms(r.self_device_ns)),
        ("GPU-side span (ms, HTA)", lambda r: _ms(r.gpu_span_ns) if r.gpu_span_calls else None),
        ("device under the span (ms, HTA)", lambda r: _ms(r.gpu_overlap_device_ns) if r.gpu_span_calls else None),
    ]
    note = ("Ranges other than Lightning's hooks (record_function, Optimizer.step#..., [pl][module]...): the device "
            "time of what was launched inside each" + ("; HTA's GPU-side spans where Kineto wrote them." if spans
                                                        else "."))
    return [Block([note], columns, rows)]


# --------------------------------------------------------------------------------------------------- idle, queue
def _stream(s: Any) -> str:
    return (f"rank {s.rank} " if s.rank is not None else "") + f"cuda:{s.device} stream {s.stream}"


def _idle(hta: HtaAnalyses) -> list[Block]:
    streams = [s for s in hta.idle.streams if s.events]
    if not streams:
        return [Block(["No device work on any stream: no idle time to split."])]
    threshold = ms(hta.idle.kernel_wait_threshold_ns)
    columns = [
        ("stream", _stream), ("events", lambda s: s.events), ("busy (ms)", lambda s: _ms(s.busy_ns)),
        ("idle (ms)", lambda s: _ms(s.idle_ns)), ("host wait (ms)", lambda s: _ms(s.host_wait_ns)),
        ("host wait share", lambda s: pct_text(s.ratio("host_wait")) if s.idle_ns else None),
        ("kernel wait (ms)", lambda s: _ms(s.kernel_wait_ns)), ("other (ms)", lambda s: _ms(s.other_ns)),
    ]
    note = (f"Gaps between consecutive device events of each stream: host wait = launched after the previous one "
            f"ended (the host was behind), kernel wait = a shorter gap than {threshold:g} ms after an earlier launch, "
            "other = the rest (e.g. waiting for another stream).")
    return [Block([note], columns, streams)]


def _queue(hta: HtaAnalyses) -> list[Block]:
    streams = [s for s in hta.queue.streams if s.launches]
    if not streams:
        return []
    columns = [
        ("stream", _stream), ("launches", lambda s: s.launches), ("mean length", lambda s: round(s.mean_length, 2)),
        ("max length", lambda s: s.max_length),
        ("blocked on a full queue (ms)", lambda s: _ms(s.blocked_ns) if s.blocked_ns else None),
    ]
    note = (f"Operations launched and not yet started on each stream (time-weighted mean); a launch blocks at "
            f"{hta.queue.max_queue_length:,} queued.")
    return [Block([note], columns, streams)]


# -------------------------------------------------------------------------------------------------------- launches
def _launches(hta: HtaAnalyses) -> list[Block]:
    stats = hta.launches
    if not stats.launches:
        return [Block(["No kernel launches paired with a device event in the traces."])]
    rows = [stats.total, *stats.launches] if len(stats.launches) > 1 else list(stats.launches)
    columns = [
        ("runtime call", lambda r: r.name), ("launches", lambda r: r.launches), ("CPU (ms)", lambda r: _ms(r.cpu_ns)),
        ("GPU (ms)", lambda r: _ms(r.gpu_ns)), ("mean delay (ms)", lambda r: _num(ms(r.mean_delay_ns))),
        ("max delay (ms)", lambda r: _num(ms(r.max_delay_ns))), ("short kernels", lambda r: r.short or None),
        ("runtime outliers", lambda r: r.runtime_outliers or None),
        ("delay outliers", lambda r: r.delay_outliers or None),
    ]
    note = (f"Each launch call paired with its device event; delay = device start - call end; short kernels run "
            f"shorter than their launch call; outliers: calls over {ms(stats.runtime_cutoff_ns):g} ms, delays over "
            f"{ms(stats.launch_delay_cutoff_ns):g} ms.")
    blocks = [Block([note], columns, rows)]
    if stats.operators:
        op_columns = [
            ("operator", lambda o: o.operator), ("kernels", lambda o: _sequence(o.kernels)),
            ("instances", lambda o: o.count), ("mean launch delay (ms)", lambda o: _num(ms(o.mean_launch_delay_ns))),
            ("mean runtime delay (ms)", lambda o: _num(ms(o.mean_runtime_delay_ns))),
        ]
        blocks.append(Block(["Operator start to its first launch call (launch delay), and that call to its kernel "
                             "(runtime delay)" + (" (the largest groups of each trace)." if stats.truncated else ".")],
                            op_columns, stats.operators, title="Delay from operator to kernel"))
    return blocks


def _sequence(kernels: Sequence[str], width: int = 40) -> str:
    short = [k if len(k) <= width else k[: width - 1] + "…" for k in kernels[:4]]
    return " → ".join(short) + (f" → … ({len(kernels)} in all)" if len(kernels) > 4 else "")


# ------------------------------------------------------------------------------------------------------- bandwidth
def _bandwidth(hta: HtaAnalyses) -> list[Block]:
    copies = hta.bandwidth.copies
    if not copies:
        return []
    columns = [
        ("copy", lambda c: c.name), ("calls", lambda c: c.calls),
        ("MB", lambda c: _num(c.bytes / 1e6) if c.bytes else None),
        ("busy (ms)", lambda c: _ms(c.busy_ns)), ("GB/s", lambda c: _num(c.gbps)),
        ("fastest GB/s", lambda c: _num(c.max_gbps) if c.timed_calls else None),
        ("mean size (KB)", lambda c: _num(c.mean_bytes / 1e3) if c.bytes else None),
    ]
    notes = ["GB/s: the copies' bytes over their summed duration."] if any(c.timed_calls for c in copies) else []
    if any(not c.timed_calls for c in copies):
        notes.append("Copies without a recorded size (ROCm traces record none) have no bandwidth.")
    return [Block(notes, columns, copies)]


# ------------------------------------------------------------------------------------------------- critical path
def _critical(hta: HtaAnalyses) -> list[Block]:
    cp = hta.critical_path
    if not cp.steps:
        return []
    total = sum(s.span_ns for s in cp.steps)
    parts = cp.breakdown_ns()
    n = len(cp.steps)
    rows = [c for c in CRITICAL_CATEGORIES if parts.get(c)]
    columns = [("on the path", lambda c: c.replace("_", " ")), ("ms per step", lambda c: _ms(parts[c] / n)),
               ("share", lambda c: pct_text(parts[c] / total) if total else None)]
    blocks = [Block([f"The longest chain of dependent host and device work through each of {n} steps "
                     f"({ms(total / n):.3f} ms per step): what it is made of."], columns, rows)]
    if cp.items:
        item_columns = [("kind", lambda i: i.kind), ("name", lambda i: i.name), ("ms on the path", lambda i: _ms(i.ns)),
                        ("per step (ms)", lambda i: _ms(i.ns / n)), ("segments", lambda i: i.segments)]
        blocks.append(Block([], item_columns, cp.items, title="What lies on the critical path"))
    return blocks


def _sequences(hta: HtaAnalyses) -> list[Block]:
    seqs = hta.sequences
    if not seqs.sequences:
        return []
    columns = [("operator", lambda s: s.operator), ("kernels", lambda s: _sequence(s.kernels)),
               ("count", lambda s: s.count), ("kernel (ms)", lambda s: _ms(s.kernel_ns)),
               ("operator (ms)", lambda s: _ms(s.op_ns))]
    note = (f"Sequences of at least {seqs.min_length} device events launched under one outermost operator, most "
            "frequent first: candidates for fusion (torch.compile) or a CUDA graph.")
    return [Block([note], columns, seqs.sequences)]


def sections(result: Result) -> list[Section]:
    """Every HTA section of ``result`` (none for a result without HTA's analyses); a section without blocks has
    nothing to show."""
    hta = result.hta
    if hta is None:
        return []
    return [
        Section("hooks", "GPU time per Lightning hook", _hooks(result, hta)),
        Section("ranges", "GPU time per record_function range", _ranges(hta)),
        Section("idle", "GPU idle time per stream", _idle(hta) if result.gpu or hta.idle.streams else []),
        Section("launches", "Kernel launches", _launches(hta) if result.gpu else []),
        Section("queue", "Launch queue", _queue(hta)),
        Section("bandwidth", "Copy bandwidth", _bandwidth(hta)),
        Section("critical", "Critical path", _critical(hta)),
        Section("sequences", "Frequent kernel sequences", _sequences(hta)),
    ]


def render_text(result: Result, top: int = 10) -> str:
    """The sections as terminal text: a heading line, its notes, the first ``top`` rows of each table."""
    out, buf = console(140)
    for sec in sections(result):
        if not sec.blocks:
            continue
        plain(out, sec.heading)
        for block in sec.blocks:
            for line in block.notes:
                plain(out, f"  {line}")
            rendered = table(block.title, block.columns, block.rows, top) if block.rows else None
            if rendered is not None:
                out.print(rendered)
    return buf.getvalue().rstrip()


def render_html(result: Result, prefix: str = "", limit: int = 50) -> list[tuple[str, str, str]]:
    """The sections as ``(anchor, heading, HTML)`` for :func:`lightning_streamprof.report.page.page` (empty HTML:
    left out)."""
    out = []
    for sec in sections(result):
        parts = []
        for block in sec.blocks:
            if block.title and block.rows:
                parts.append(f"<h3>{for_html(block.title)}</h3>")
            parts += [page.note(line) for line in block.notes]
            if block.rows:
                parts.append(page.table(block.columns, block.rows, limit))
        out.append((f"{prefix}{sec.anchor}", sec.heading, "".join(parts)))
    return out
