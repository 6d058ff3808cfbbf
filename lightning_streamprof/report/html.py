"""The self-contained HTML report of a profiled run (``streamprof report``, and the profiler at the end of fit).

Built from the results model only (run -> windows -> ranks, and the run's merged result): overview cards, the
step breakdown per window, the GPU utilization timelines, kernels, operators and hot source lines, memory, the
distributed view, the recommendations and what StreamPipeline did. Every name that comes from a trace is
escaped; charts are inline SVG.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from urllib.parse import quote

from lightning_streamprof.escape import for_html
from lightning_streamprof.report import distributed, svg
from lightning_streamprof.report.cost import cost_sentence
from lightning_streamprof.report.devices import device_note
from lightning_streamprof.report.findings import findings
from lightning_streamprof.report.hta_sections import render_html as hta_sections
from lightning_streamprof.report.page import cards, note, page, table
from lightning_streamprof.report.memory_snapshot import snapshots_html
from lightning_streamprof.report.slowdown import section_html
from lightning_streamprof.report.summary import settled, way_note
from lightning_streamprof.report.units import UNKNOWN, mib, ms, pct_text
from lightning_streamprof.results import (CATEGORIES, PipelineRun, PipelineWork, ProfilingCost, Result, RunResults,
                                          Steps, TraceIdentity, WindowResults)

TOP = 50
_CHARTS = 12
_SM_COLOR = "#59a14f"


def gpu_overview(result: Result) -> tuple[float | None, float | None, float | None]:
    """Utilization (kernel time / span summed over devices), span-weighted SM efficiency and kernel-time-weighted
    achieved occupancy over every device of every trace; None where unknown."""
    gpus = result.gpu
    span = sum(g.span_ns for g in gpus)
    util = sum(g.kernel_ns for g in gpus) / span if span else None
    sm = [(g.sm_efficiency, g.span_ns) for g in gpus if g.sm_efficiency is not None]
    occ = [(g.achieved_occupancy, g.kernel_ns) for g in gpus if g.achieved_occupancy is not None]

    def mean(pairs: list[tuple[float, int]]) -> float | None:
        weight = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / weight if weight else None

    return util, mean(sm), mean(occ)


def peak_memory(result: Result) -> tuple[int | None, int | None, str]:
    """The highest peak allocated (bytes) of any GPU, else of the CPU; the device's memory; which device."""
    devices = [d for d in result.memory.devices if d.device != "CPU"] or list(result.memory.devices)
    if not devices:
        return None, None, ""
    top = max(devices, key=lambda d: d.peak_allocated_bytes)
    return top.peak_allocated_bytes, top.total_memory, top.device


def _overview(result: Result, notes: Sequence[str], cost: ProfilingCost | None = None,
              outside: Sequence[str] = ()) -> str:
    util, sm, occ = gpu_overview(result)
    peak, total, device = peak_memory(result)
    steps = result.steps
    no_gpu = "no GPU kernels in the traces" if not result.gpu else ""
    items = [
        ("Step time", f"{steps.mean_ms:.2f} ms" if steps.count else "n/a", f"mean of {steps.count} steps"),
        ("GPU utilization", pct_text(util), no_gpu or "kernel busy time / step span"),
        ("Est. SM efficiency", pct_text(sm), no_gpu or "SMs with work, time-weighted"),
        ("Est. achieved occupancy", pct_text(occ), no_gpu or "kernel-time-weighted"),
        ("Peak memory", f"{mib(peak):,.1f} MiB" if peak is not None else "n/a",
         (f"{device}" + (f", {100 * peak / total:.1f}% of {total / 2**30:.1f} GiB" if total and peak else ""))
         if peak is not None else "record with profile_memory=True"),
    ]
    if cost is not None:
        items.append(("Profiling cost", f"{100 * cost.fraction:.1f}%",
                      f"of the training time: {cost.seconds:.2f} s of {cost.training_seconds:.2f} s"))
    extra = f'<p class="note">{for_html(cost_sentence(cost))}</p>' if cost is not None else ""
    extra += "".join(f'<p class="note">{for_html(n)}</p>' for n in outside)
    extra += "".join(f'<p class="note">{for_html(n)}</p>' for n in dict.fromkeys(filter(None, map(device_note,
                                                                                                      result.gpu))))
    extra += "".join(f'<p class="note warn">{for_html(n)}</p>' for n in [*notes, *unsettled_notes(result)])
    return cards(items) + extra


def unsettled_notes(result: Result) -> list[str]:
    """One line for each window recorded during a staging callback's trials or before its choice, with the ways it
    recorded (from the traces' metadata)."""
    seen: dict[int | None, str] = {}
    for t in result.traces:
        if t.window not in seen and not settled(t.pipeline):
            seen[t.window] = way_note(t.window, t.pipeline) or ""
    return [line for _, line in sorted(seen.items(), key=lambda x: x[0] or 0) if line]


def _window_label(w: WindowResults, steps: Steps) -> str:
    numbers = [s.step for s in steps.per_step if s.step is not None]
    span = f"steps {min(numbers)}-{max(numbers)}" if numbers else f"step {w.first_step}"
    return f"window {w.window} ({span})" if w.window is not None else span


def _breakdown(run: RunResults) -> str:
    rows = []
    for w in run.windows:
        steps = Steps.of([s for r in w.ranks for s in r.steps.per_step])
        if steps.count:
            rows.append((_window_label(w, steps), steps.breakdown_ms))
    if not rows:
        return ""
    merged = run.merged.steps
    parts = [note("Mean time per step in each category (ms); the categories claim time in the order shown, "
                  "so the parts add up to the step."),
             svg.legend(CATEGORIES), svg.stacked_bars(rows, CATEGORIES)]
    per_step = [(f"step {s.step}" + (f" rank {s.rank}" if s.rank is not None and len(run.merged.traces) > 1 else ""),
                 {c: ms(v) for c, v in s.breakdown_ns.items()}) for s in merged.per_step[:120]]
    if len(per_step) > 1:
        parts.append(f"<details><summary>Each step ({len(merged.per_step)})</summary>"
                     f"{svg.stacked_bars(per_step, CATEGORIES, bar=14)}</details>")
    columns = [("category", lambda c: c), ("mean per step (ms)", lambda c: merged.breakdown_ms[c]),
               ("share of step",
                lambda c: pct_text(merged.breakdown_ms[c] / merged.mean_ms) if merged.mean_ms else None)]
    timed = [c for c in CATEGORIES if merged.breakdown_ms.get(c, 0.0) > 0]
    idle = [c for c in CATEGORIES if c not in timed]
    if idle:
        parts.append(note(f"No time in these steps: {', '.join(idle)}"
                          + (" (no GPU work in the traces)." if not run.merged.gpu else ".")))
    return "".join(parts) + table(columns, timed)


def _gpu_timelines(result: Result) -> str:
    figures = []
    for g in result.gpu[:_CHARTS]:
        line = g.timeline
        if line is None or not line.starts_ns:
            continue
        t0 = line.starts_ns[0]
        xs = [ms(s - t0) for s in line.starts_ns]
        end = ms(line.end_ns - t0)
        series = [svg.Series("GPU utilization %", svg.step_points(xs, end, [100 * u for u in line.utilization]),
                             svg.color("kernel"))]
        if any(line.sm_efficiency):
            series.append(svg.Series("Est. SM efficiency %", svg.step_points(
                xs, end, [100 * u for u in line.sm_efficiency]), _SM_COLOR, dashed=True))
        where = " ".join(x for x in (f"window {g.window}" if g.window is not None else "",
                                     f"rank {g.rank}" if g.rank is not None else "", f"cuda:{g.device}") if x)
        chart = svg.line_chart(series, "ms since the window started", "%", y_max=100)
        figures.append(f"<figure>{chart}<figcaption>{for_html(where)}: utilization {pct_text(g.utilization)}, "
                       f"SM efficiency {pct_text(g.sm_efficiency)}{for_html(' — ' + g.name if g.name else '')}"
                       "</figcaption></figure>")
    if not figures:
        return note("No GPU kernels in the traces (a CPU-only run): nothing to show here.") if not result.gpu else ""
    more = note(f"{len(figures)} of {len(result.gpu)} devices shown.") if len(result.gpu) > len(figures) else ""
    keys = ["GPU utilization %", "Est. SM efficiency %"]
    colors = dict(zip(keys, (svg.color("kernel"), _SM_COLOR)))
    return svg.legend(keys, colors=colors) + f'<div class="grid2">{"".join(figures)}</div>' + more


def _kernels(result: Result) -> str:
    n = max(result.steps.count, 1)
    columns = [
        ("kernel", lambda k: k.name), ("calls", lambda k: k.calls), ("total (ms)", lambda k: ms(k.total_ns)),
        ("per step (ms)", lambda k: ms(k.total_ns) / n), ("mean (ms)", lambda k: ms(k.mean_ns)),
        ("max (ms)", lambda k: ms(k.max_ns)), ("blocks per SM", lambda k: k.blocks_per_sm),
        ("occupancy", lambda k: pct_text(k.occupancy) if k.occupancy is not None else None),
        ("Tensor Cores", lambda k: "yes" if k.tensor_cores else None),
    ]
    tc = result.tensor_cores
    head = note(f"{len(result.kernels)} kernels; Tensor Core kernels {pct_text(tc.tc_share)} of kernel time.")
    return head + table(columns, result.kernels, TOP) if result.kernels else ""


def source_link(file: str, line: int) -> str:
    """The location as HTML: a ``vscode://file/`` link when the file exists here, else plain text."""
    text = for_html(f"{file}:{line}")
    if os.path.isfile(file):
        href = "vscode://file/" + quote(os.path.abspath(file).lstrip("/"), safe="/:") + f":{line}"
        return f'<a href="{for_html(href)}">{text}</a>'
    return text


def _operators(result: Result) -> str:
    columns = [
        ("operator", lambda o: o.name), ("input shapes", lambda o: o.input_shapes), ("calls", lambda o: o.calls),
        ("host self (ms)", lambda o: ms(o.host_self_ns)), ("host total (ms)", lambda o: ms(o.host_total_ns)),
        ("device self (ms)", lambda o: ms(o.device_self_ns) if o.device_total_ns else None),
        ("device total (ms)", lambda o: ms(o.device_total_ns) if o.device_total_ns else None),
    ]
    out = table(columns, result.operators, TOP, name_cols=2)
    if result.source_lines:
        lines = [
            ("line", lambda s: (source_link(s.file, s.line), s.location)), ("function", lambda s: s.function),
            ("host self (ms)", lambda s: ms(s.host_self_ns)),
            ("device self (ms)", lambda s: ms(s.device_self_ns) if s.device_self_ns else None),
            ("share of self time", lambda s: (pct_text(s.share), s.share)),
        ]
        out += "<h3>Hot source lines</h3>" + table(lines, result.source_lines, TOP, name_cols=2)
    elif result.operators:
        out += note("Hot source lines need traces recorded with with_stack=True.")
    return out


def _memory(result: Result, snapshots: bool = False) -> str:
    mem = result.memory
    if not mem.devices:
        return "" if snapshots else note("No memory events: record with StreamProfiler(profile_memory=True) for "
                                         "the memory view.")
    devices = sorted(mem.devices, key=lambda d: (d.device == "CPU", d.window or 0, d.rank or 0))
    figures = []
    for d in devices[:_CHARTS]:
        if len(d.curve) < 2:
            continue
        t0 = d.curve[0][0]
        alloc = [(ms(ts - t0), mib(a)) for ts, a, _ in d.curve]
        series = [svg.Series("allocated MiB", alloc, svg.color("kernel"))]
        if any(r for _, _, r in d.curve):
            series.append(svg.Series("reserved MiB", [(ms(ts - t0), mib(r)) for ts, _, r in d.curve],
                                     svg.color("memcpy"), dashed=True))
        where = " ".join(x for x in (f"window {d.window}" if d.window is not None else "",
                                     f"rank {d.rank}" if d.rank is not None else "", d.device) if x)
        figures.append(f"<figure>{svg.line_chart(series, 'ms since the first memory event', 'MiB')}"
                       f"<figcaption>{for_html(where)}: peak allocated {mib(d.peak_allocated_bytes):,.1f} MiB"
                       "</figcaption></figure>")
    columns = [
        ("operator", lambda m: m.name), ("device", lambda m: m.device), ("calls", lambda m: m.calls),
        ("allocated (MiB)", lambda m: mib(m.allocation_bytes)), ("allocations", lambda m: m.allocations),
        ("size increase (MiB)", lambda m: mib(m.increase_bytes)),
        ("self allocated (MiB)", lambda m: mib(m.self_allocation_bytes)),
        ("self increase (MiB)", lambda m: mib(m.self_increase_bytes)),
    ]
    keys = ["allocated MiB", "reserved MiB"]
    colors = dict(zip(keys, (svg.color("kernel"), svg.color("memcpy"))))
    return (svg.legend(keys, colors=colors) + f'<div class="grid2">{"".join(figures)}</div>'
            + "<h3>Memory by operator</h3>" + table(columns, mem.operators, TOP))


def _recommendations(result: Result, windows: Sequence[WindowResults]) -> str:
    found = findings(result, windows)
    if not found:
        return note("Nothing to recommend: no rule found a problem in these traces.")
    out = []
    for f in found:
        items = "".join(f"<li>{for_html(label)}: {for_html(line)}</li>" for label, line in f.per_trace)
        out.append(f'<div class="rec"><div class="id">{for_html(f.id)}</div><div>{for_html(f.message)}</div>'
                   + (f"<ul>{items}</ul>" if items else "") + "</div>")
    return "".join(out)


def _recorded(traces: Sequence[TraceIdentity]) -> PipelineRun | None:
    """The staging callback's state at the latest window whose trace recorded one."""
    ways = [t.pipeline for t in sorted(traces, key=lambda t: -1 if t.window is None else t.window) if t.pipeline]
    return ways[-1].first if ways else None


def _pipeline_card(result: Result, state: PipelineRun | None) -> tuple[str, str, str]:
    """What the run's StreamPipeline did: its own state at the run's end (``state``), else the latest window's, else
    whether its ranges are in the traces."""
    work = result.pipeline
    if state is not None:
        return (state.name, state.way, f"mode={state.mode}, at the end of the run")
    recorded = _recorded(result.traces)
    if recorded is not None:
        return (recorded.name, recorded.way, f"mode={recorded.mode}, in the latest window")
    return ("StreamPipeline in the traces", "staging" if work.pipelined else "not used",
            "its ranges are in the steps" if work.pipelined else "add StreamPipeline() to the callbacks")


def _frozen_card(work: PipelineWork) -> tuple[str, str, str]:
    """Frozen modules' forward per step; n/a when the traces hold no module frames to find them by."""
    if not work.module_frames:
        return ("frozen modules' forward", UNKNOWN,
                "the traces hold no module frames: record with StreamProfiler(with_stack=True) to time them")
    return ("frozen modules' forward", f"{ms(work.frozen_ns) / work.steps:.3f} ms",
            "per step: " + (", ".join(work.frozen_names[:3]) or "no frozen module's forward in the steps"))


def _pipeline(result: Result, pipeline_text: str | None, state: PipelineRun | None = None) -> str:
    work = result.pipeline
    parts = []
    if pipeline_text:
        parts.append(f"<pre>{for_html(pipeline_text)}</pre>")
    if work.steps:
        n = work.steps
        parts.append(cards([
            _pipeline_card(result, state),
            ("on_after_batch_transfer", f"{ms(work.hook_ns) / n:.3f} ms",
             "per step: " + ", ".join(work.hook_names[:3])),
            _frozen_card(work),
        ]))
    return "".join(parts)


def _ways(t: TraceIdentity) -> str | None:
    """The ways a staging callback ran a trace's steps, marked when they were auto's trials or before its choice."""
    if t.pipeline is None:
        return None
    ways = ", ".join(t.pipeline.ways) or t.pipeline.first.way
    if settled(t.pipeline):
        return ways
    when = "during auto's trials" if t.pipeline.in_trials else "before its choice"
    return f"{ways} (recorded {when})"


def _traces(result: Result) -> str:
    columns = [("path", lambda t: t.path), ("window", lambda t: t.window), ("first step", lambda t: t.first_step),
               ("rank", lambda t: t.rank), ("host", lambda t: t.host), ("way (StreamPipeline)", _ways)]
    return table(columns, result.traces)


def run_sections(run: RunResults, *, pipeline_text: str | None = None, notes: Sequence[str] = (),
                 prefix: str = "", cost: ProfilingCost | None = None,
                 outside: Sequence[str] = (), explained: Sequence | None = None,
                 snapshots: Sequence = ()) -> list[tuple[str, str, str]]:
    """The sections of one run: ``(anchor, heading, HTML)``; ``explained``: the slowdowns' explanations (None: found
    among the run's windows); ``snapshots``: the windows' memory snapshots."""
    r = run.merged
    p = f"{prefix}-" if prefix else ""
    return [
        (f"{p}overview", "Overview", _overview(r, notes, cost, outside)),
        (f"{p}off-schedule", "Windows off the schedule", section_html(r.traces, run.windows, explained)),
        (f"{p}breakdown", "Step breakdown", _breakdown(run)),
        (f"{p}gpu", "GPU utilization", _gpu_timelines(r)),
        (f"{p}kernels", "Kernels", _kernels(r)),
        (f"{p}operators", "Operators and source lines", _operators(r)),
        (f"{p}memory", "Memory", _memory(r, bool(snapshots)) + snapshots_html(snapshots)),
        *hta_sections(r, prefix=p, limit=TOP),
        (f"{p}distributed", "Distributed", distributed.render(r)),
        (f"{p}recommendations", "Recommendations", _recommendations(r, run.windows)),
        (f"{p}pipeline", "StreamPipeline", _pipeline(r, pipeline_text, run.pipeline)),
        (f"{p}traces", "Traces", _traces(r)),
    ]


def render_report(runs: Sequence[RunResults], source: str = "", *, pipeline: Mapping[str | None, str] | None = None,
                  notes: Sequence[str] = (), cost: ProfilingCost | None = None, outside: Sequence[str] = (),
                  explained: Sequence | None = None, snapshots: Sequence = ()) -> str:
    """The whole HTML document for ``runs`` (each run's sections in turn); ``pipeline`` holds StreamPipeline's
    report of each run, ``notes`` lines for the overview (e.g. windows the overhead budget moved), ``cost`` what
    profiling cost the run and ``outside`` what it spent outside its training steps, ``explained`` its slowdowns'
    explanations (the profiler's own report); ``snapshots`` the windows' memory snapshots (each run gets those under
    its directory)."""
    sections: list[tuple[str, str, str]] = []
    for i, run in enumerate(runs):
        body = run_sections(run, pipeline_text=(pipeline or {}).get(run.run), notes=notes,
                            prefix=f"run{i}" if len(runs) > 1 else "", cost=cost, outside=outside,
                            explained=explained,
                            snapshots=[m for m in snapshots if len(runs) == 1 or f"/{run.run}/" in m.path])
        if len(runs) > 1:
            body = [(a, f"{run.run} · {h}", html) for a, h, html in body]
        sections += body
    names = ", ".join(r.run or "?" for r in runs)
    traces = sum(len(r.merged.traces) for r in runs)
    subtitle = for_html(f"{source} · run {names} · {traces} trace{'s' if traces != 1 else ''} · "
                      f"made {time.strftime('%Y-%m-%d %H:%M')}")
    return page(f"streamprof report: {names}", subtitle, sections)

