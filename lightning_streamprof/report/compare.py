"""``streamprof compare A B``: what changed between two results (runs, windows or traces) — step time and its
breakdown, GPU metrics, top kernels, memory peaks and per-rank step time — as terminal tables and as HTML."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lightning_streamprof.escape import for_html
from lightning_streamprof.report import svg
from lightning_streamprof.report.html import gpu_overview
from lightning_streamprof.report.page import cards, note, page, table
from lightning_streamprof.report.tables import console
from lightning_streamprof.report.units import mib, ms
from lightning_streamprof.results import CATEGORIES, Result, Steps


@dataclass(frozen=True)
class Row:
    """One compared quantity: its value in A and in B (None where the side has none)."""

    name: str
    a: float | None
    b: float | None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def change(self) -> float | None:
        """Relative change from A to B (0.1 = 10% more)."""
        return None if self.a in (None, 0) or self.b is None else (self.b - self.a) / self.a


@dataclass(frozen=True)
class Comparison:
    """Every table of a comparison; ``unit`` of each group is in its title."""

    a_label: str
    b_label: str
    step: list[Row]
    breakdown: list[Row]
    gpu: list[Row]
    kernels: list[Row]
    operators: list[Row]
    memory: list[Row]
    ranks: list[Row]
    a: Result
    b: Result


def _per_step_kernels(result: Result) -> dict[str, float]:
    n = max(result.steps.count, 1)
    return {k.name: ms(k.total_ns) / n for k in result.kernels}


def _per_step_operators(result: Result) -> dict[str, float]:
    """Host self time per step of each operator name (input shapes merged): what a CPU run has to compare."""
    n, out = max(result.steps.count, 1), {}
    for op in result.operators:
        out[op.name] = out.get(op.name, 0.0) + ms(op.host_self_ns) / n
    return out


def _top(a: dict[str, float], b: dict[str, float], top: int) -> list[str]:
    """The ``top`` names of either side by value, the largest first."""
    names = set(sorted(a, key=a.get, reverse=True)[:top]) | set(sorted(b, key=b.get, reverse=True)[:top])
    return sorted(names, key=lambda n: -max(a.get(n, 0.0), b.get(n, 0.0)))


def _peaks(result: Result) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in result.memory.devices:
        out[d.device] = max(out.get(d.device, 0.0), mib(d.peak_allocated_bytes))
    return out


def _rank_steps(result: Result) -> dict[int, float]:
    ranks = sorted({s.rank for s in result.steps.per_step if s.rank is not None})
    return {r: Steps.of([s for s in result.steps.per_step if s.rank == r]).mean_ms for r in ranks}


def _rows(a: dict, b: dict, keys: Sequence) -> list[Row]:
    return [Row(str(k), a.get(k), b.get(k)) for k in keys]


def compare(a: Result, b: Result, a_label: str = "A", b_label: str = "B", top: int = 10) -> Comparison:
    """The comparison of ``b`` against ``a``; kernels are the ``top`` of either side by time per step."""
    ka, kb = _per_step_kernels(a), _per_step_kernels(b)
    oa, ob = _per_step_operators(a), _per_step_operators(b)
    pa, pb = _peaks(a), _peaks(b)
    ra, rb = _rank_steps(a), _rank_steps(b)
    ga, gb = gpu_overview(a), gpu_overview(b)
    gpu = [Row(label, None if x is None else 100 * x, None if y is None else 100 * y)
           for label, x, y in zip(("GPU utilization", "Est. SM efficiency", "Est. achieved occupancy"), ga, gb)]
    return Comparison(
        a_label=a_label, b_label=b_label,
        step=[Row("step", a.steps.mean_ms if a.steps.count else None, b.steps.mean_ms if b.steps.count else None)],
        breakdown=_rows(a.steps.breakdown_ms, b.steps.breakdown_ms, CATEGORIES),
        gpu=[r for r in gpu if r.a is not None or r.b is not None],
        kernels=_rows(ka, kb, _top(ka, kb, top)),
        operators=_rows(oa, ob, _top(oa, ob, top)),
        memory=_rows(pa, pb, sorted(set(pa) | set(pb))),
        ranks=[Row(f"rank {r}", ra.get(r), rb.get(r)) for r in sorted(set(ra) | set(rb))] if len(ra) + len(rb) > 2
        else [],
        a=a, b=b,
    )


def _fmt(x: float | None, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def _change(row: Row) -> str:
    c = row.change
    return "" if c is None else f"{100 * c:+.1f}%"


def groups(c: Comparison) -> list[tuple[str, str, list[Row]]]:
    """``(title, unit in words, rows)`` of every non-empty table."""
    out = [("Step time", "ms per step", c.step), ("Step breakdown", "ms per step", c.breakdown),
           ("GPU", "percent", c.gpu), ("Top kernels", "ms per step", c.kernels),
           ("Top operators", "ms of host self time per step", c.operators),
           ("Peak memory allocated", "MiB", c.memory), ("Step time per rank", "ms per step", c.ranks)]
    out = [(title, unit, [r for r in rows if r.a or r.b]) for title, unit, rows in out]  # both 0 or None: left out
    return [g for g in out if g[2]]


def render_compare_text(c: Comparison, width: int = 140) -> str:
    """Plain-text tables: each quantity in A and B, the difference and the relative change."""
    from rich.table import Table

    out, buf = console(width)
    out.print(f"A: {c.a_label}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"B: {c.b_label}", markup=False, highlight=False, soft_wrap=True)
    for title, unit, rows in groups(c):
        t = Table(title=f"{title} ({unit})", title_justify="left")
        t.add_column("", justify="left", overflow="fold", max_width=72)
        for header in ("A", "B", "B - A", "change"):
            t.add_column(header, justify="right", no_wrap=True)
        for r in rows:
            t.add_row(r.name, _fmt(r.a), _fmt(r.b), _fmt(r.delta), _change(r))
        out.print(t)
    return buf.getvalue().rstrip()


def _html_rows(rows: list[Row]) -> str:
    def change(r: Row):
        ch = r.change
        if ch is None:
            return None
        cls = "up" if ch > 0 else "down" if ch < 0 else ""
        return f'<span class="{cls}">{100 * ch:+.1f}%</span>', ch

    columns = [("", lambda r: r.name), ("A", lambda r: r.a), ("B", lambda r: r.b), ("B - A", lambda r: r.delta),
               ("change", change)]
    return table(columns, rows)


class Chart(str):
    """An SVG chart as a string that notebooks show as a picture (``_repr_svg_``)."""

    def _repr_svg_(self) -> str:
        return str(self)


def breakdown_chart(c: Comparison) -> Chart:
    """A and B's mean step breakdown as stacked bars (ms), with its legend, standalone SVG."""
    rows = [(f"A: {c.a_label}"[:28], c.a.steps.breakdown_ms), (f"B: {c.b_label}"[:28], c.b.steps.breakdown_ms)]
    svg_text = svg.stacked_bars(rows, CATEGORIES, with_legend=True)
    style = "<style>text{font:11px sans-serif;fill:#3b4252}.grid{stroke:#e6e9ef}</style>"
    return Chart(svg_text.replace(">", ">" + style, 1))


def render_compare_html(c: Comparison) -> str:
    """A self-contained HTML page of the comparison (bars of both breakdowns, then every table)."""
    step = c.step[0]
    overview = cards([
        ("A: step time", f"{_fmt(step.a, 2)} ms", f"{c.a.steps.count} steps"),
        ("B: step time", f"{_fmt(step.b, 2)} ms", f"{c.b.steps.count} steps"),
        ("Change", _change(step) or "n/a", f"{_fmt(step.delta, 3)} ms per step" if step.delta is not None else ""),
    ]) + f'<p class="note">A: {for_html(c.a_label)}<br>B: {for_html(c.b_label)}</p>'
    bars = svg.legend(CATEGORIES) + svg.stacked_bars([("A", c.a.steps.breakdown_ms), ("B", c.b.steps.breakdown_ms)],
                                                     CATEGORIES)
    sections = [("overview", "Overview", overview)]
    for title, unit, rows in groups(c):
        anchor = title.lower().replace(" ", "-")
        chart = bars if title == "Step breakdown" else ""  # the bars head the breakdown's table: one section
        sections.append((anchor, title, chart + note(f"In {unit}.") + _html_rows(rows)))
    return page("streamprof compare", for_html(f"A: {c.a_label} · B: {c.b_label}"), sections)


def compare_slowdowns(windows: Sequence, top: int = 10) -> tuple[str, str] | None:
    """A run's slowdowns (``windows``: its :class:`~lightning_streamprof.results.WindowResults`), each window the
    profiler recorded because the run slowed down against the last normal window before it: the explanation, then
    every table of the comparison; as text and as an HTML page. None when the run has no such pair."""
    from lightning_streamprof.report.slowdown import explanation_html, explanation_text, trigger_note
    from lightning_streamprof.results.triggers import explain, slowdown_pairs

    pairs = slowdown_pairs(windows)
    if not pairs:
        return None
    texts, sections = [], []
    for normal, slow, trigger in pairs:
        e = explain(normal, slow, trigger)
        c = compare(normal, slow, f"window {e.normal_window} (normal)", f"window {e.window} (slowdown)", top=top)
        texts += [f"{trigger_note(e.window, trigger)}.\n{explanation_text(e)}", render_compare_text(c)]
        sections.append((f"window{e.window}", f"Window {e.window} against window {e.normal_window}",
                         explanation_html(e) + "".join(f"<h3>{for_html(title)}</h3>" + note(f"In {unit}.")
                                                       + _html_rows(rows) for title, unit, rows in groups(c))))
    return "\n\n".join(texts), page("streamprof compare: slowdowns", "each slowdown against the last normal window",
                                    sections)
