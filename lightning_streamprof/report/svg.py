"""Inline SVG charts for the HTML report: stacked bars and line charts, every label escaped, no script needed
(hover titles are SVG ``<title>`` elements)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lightning_streamprof.escape import for_html

#: one colour per step-breakdown category (and for the distributed view's parts)
COLORS = {
    "kernel": "#4e79a7", "memcpy": "#f28e2b", "memset": "#edc948", "communication": "#e15759",
    "runtime": "#76b7b2", "dataloader": "#b07aa1", "cpu_exec": "#59a14f", "other": "#bab0ac",
    "computation": "#4e79a7", "overlap": "#9c755f", "sync": "#ff9da7", "transfer": "#e15759",
}
_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")


def color(key: str, index: int = 0) -> str:
    """The colour of a category, else the ``index``-th of a palette."""
    return COLORS.get(key, _PALETTE[index % len(_PALETTE)])


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    step = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * step:
            step *= mult
            break
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _fmt_tick(value: float) -> str:
    return f"{value:.3g}"


def legend(keys: Sequence[str], labels: Mapping[str, str] | None = None,
           colors: Mapping[str, str] | None = None) -> str:
    """An HTML legend of coloured swatches (``colors`` overrides a key's colour)."""
    items = "".join(
        f'<span class="key"><i style="background:{(colors or {}).get(k) or color(k, i)}"></i>'
        f'{for_html((labels or {}).get(k, k))}</span>' for i, k in enumerate(keys))
    return f'<div class="legend">{items}</div>'


def _svg_legend(keys: Sequence[str], x0: float, y: float) -> tuple[str, float]:
    """A legend row drawn inside an SVG (for a chart shown on its own); returns it and its height."""
    out, x = [], x0
    for i, key in enumerate(keys):
        out.append(f'<rect x="{x:.0f}" y="{y}" width="11" height="11" fill="{color(key, i)}"/>'
                   f'<text x="{x + 15:.0f}" y="{y + 10}" class="tick">{for_html(key)}</text>')
        x += 22 + 7 * len(key)
    return "".join(out), 20.0


def stacked_bars(rows: Sequence[tuple[str, Mapping[str, float]]], keys: Sequence[str], unit: str = "ms",
                 width: int = 860, bar: int = 22, with_legend: bool = False) -> str:
    """Horizontal bars, one per ``(label, {key: value})``, stacked in the order of ``keys``; total at the end.
    ``with_legend`` draws the legend inside the SVG (the HTML report has its own)."""
    if not rows:
        return ""
    label_w, right = 190, 80
    plot = width - label_w - right
    top = max((sum(max(v.get(k, 0.0), 0.0) for k in keys) for _, v in rows), default=0.0) or 1.0
    gap = 8
    key_row, offset = _svg_legend(keys, label_w, 4) if with_legend else ("", 0.0)
    height = len(rows) * (bar + gap) + 24 + offset
    out = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height:.0f}" width="100%" '
           f'xmlns="http://www.w3.org/2000/svg">{key_row}<g transform="translate(0 {offset:.0f})">']
    inner = height - offset
    for tick in _ticks(top):
        x = label_w + plot * tick / max(top, _ticks(top)[-1])
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{inner - 18:.0f}" class="grid"/>'
                   f'<text x="{x:.1f}" y="{inner - 4:.0f}" class="tick" text-anchor="middle">{_fmt_tick(tick)}</text>')
    scale = plot / max(top, _ticks(top)[-1])
    for i, (label, values) in enumerate(rows):
        y = i * (bar + gap) + 4
        out.append(f'<text x="{label_w - 8}" y="{y + bar * 0.7:.1f}" class="label" text-anchor="end">'
                   f'{for_html(label)}</text>')
        x = float(label_w)
        total = 0.0
        for j, key in enumerate(keys):
            value = max(float(values.get(key, 0.0)), 0.0)
            total += value
            w = value * scale
            if w <= 0:
                continue
            out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar}" fill="{color(key, j)}">'
                       f'<title>{for_html(label)}: {for_html(key)} {value:.3f} {for_html(unit)}</title></rect>')
            x += w
        out.append(f'<text x="{x + 6:.1f}" y="{y + bar * 0.7:.1f}" class="value">{total:.3f} {for_html(unit)}</text>')
    out.append("</g></svg>")
    return "".join(out)


@dataclass(frozen=True)
class Series:
    """One line of a chart: points ``(x, y)``, a label and a colour; ``dashed`` for a secondary line."""

    label: str
    points: Sequence[tuple[float, float]]
    color: str
    dashed: bool = False


def line_chart(series: Sequence[Series], x_label: str, y_label: str, y_max: float | None = None,
               width: int = 420, height: int = 200) -> str:
    """Lines over a shared x axis from 0, with axis ticks and labels; ``y_max`` fixes the top (e.g. 100 %)."""
    pts = [p for s in series for p in s.points]
    if not pts:
        return ""
    left, bottom, top_pad, right = 52, 34, 10, 12
    plot_w, plot_h = width - left - right, height - bottom - top_pad
    x_ticks = _ticks(max(p[0] for p in pts))
    y_ticks = _ticks(y_max if y_max is not None else max(p[1] for p in pts))
    x_top, y_top = x_ticks[-1] or 1.0, (y_max if y_max is not None else y_ticks[-1]) or 1.0

    def sx(x: float) -> float:
        return left + plot_w * x / x_top

    def sy(y: float) -> float:
        return top_pad + plot_h * (1 - min(y, y_top) / y_top)

    out = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="100%" '
           f'xmlns="http://www.w3.org/2000/svg">']
    for t in y_ticks:
        if t > y_top + 1e-9:
            continue
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid"/>'
                   f'<text x="{left - 4}" y="{sy(t) + 4:.1f}" class="tick" text-anchor="end">{_fmt_tick(t)}</text>')
    for t in x_ticks:
        out.append(f'<text x="{sx(t):.1f}" y="{height - bottom + 14}" class="tick" text-anchor="middle">'
                   f'{_fmt_tick(t)}</text>')
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{sy(0):.1f}" y2="{sy(0):.1f}" class="axis"/>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" class="tick" text-anchor="middle">'
               f'{for_html(x_label)}</text>')
    out.append(f'<text x="12" y="{top_pad + plot_h / 2:.1f}" class="tick" text-anchor="middle" '
               f'transform="rotate(-90 12 {top_pad + plot_h / 2:.1f})">{for_html(y_label)}</text>')
    for s in series:
        if not s.points:
            continue
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s.points)
        dash = ' stroke-dasharray="4 3"' if s.dashed else ""
        out.append(f'<polyline fill="none" stroke="{s.color}" stroke-width="1.6"{dash} points="{path}">'
                   f'<title>{for_html(s.label)}</title></polyline>')
    out.append("</svg>")
    return "".join(out)


def step_points(starts: Sequence[float], end: float, values: Sequence[float]) -> list[tuple[float, float]]:
    """A step function's points (each bucket's value held from its start to the next start)."""
    out: list[tuple[float, float]] = []
    for i, value in enumerate(values):
        stop = starts[i + 1] if i + 1 < len(starts) else end
        out += [(starts[i], value), (stop, value)]
    return out

