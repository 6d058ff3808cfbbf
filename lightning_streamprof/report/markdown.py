"""A markdown summary of one window's result, for TensorBoard's text tab (plain TensorBoard, no plugin)."""

from __future__ import annotations

from lightning_streamprof.report.tables import ms, pct
from lightning_streamprof.results import Result

_TOP = 5


def _escape(text: str) -> str:
    """Text safe in a markdown table cell (no HTML, no column breaks)."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
            .replace("\n", " "))


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def window_markdown(result: Result, window: int, first_step: int, last_step: int, *,
                    moved: str | None = None, path: str | None = None, cost: str | None = None) -> str:
    """GPU metrics, the step breakdown (ms), the top kernels and operators and the recommendations of a window;
    ``moved`` says that the overhead budget moved the window, ``cost`` what profiling has cost so far."""
    lines = [f"**StreamProfiler window {window}**: steps {first_step}-{last_step}"]
    if moved:
        lines += ["", f"*Note: {_escape(moved)}.*"]
    if cost:
        lines += ["", f"*{_escape(cost)}*"]
    if path:
        lines += ["", f"Trace: `{_escape(path)}`"]
    if result.gpu:
        lines += ["", "| device | GPU utilization | Est. SM efficiency | Est. achieved occupancy |",
                  "|---|--:|--:|--:|"]
        lines += [f"| cuda:{g.device} | {pct(g.utilization)} | {pct(g.sm_efficiency)} | {pct(g.achieved_occupancy)} |"
                  for g in result.gpu]
    steps = result.steps
    if steps.count:
        lines += ["", f"Mean step **{steps.mean_ms:.2f} ms** over {steps.count} steps:", "",
                  "| category | ms per step | share |", "|---|--:|--:|"]
        lines += [f"| {c} | {v:.3f} | {pct(v / steps.mean_ms) if steps.mean_ms else ''} |"
                  for c, v in steps.breakdown_ms.items() if v >= 0.0005]
    if result.kernels:
        lines += ["", "| top kernels | calls | total (ms) |", "|---|--:|--:|"]
        lines += [f"| {_escape(_short(k.name))} | {k.calls} | {ms(k.total_ns)} |" for k in result.kernels[:_TOP]]
    if result.operators:
        lines += ["", "| top operators | calls | host self (ms) | device self (ms) |", "|---|--:|--:|--:|"]
        lines += [f"| {_escape(_short(o.name))} | {o.calls} | {ms(o.host_self_ns)} | {ms(o.device_self_ns)} |"
                  for o in result.operators[:_TOP]]
    if result.recommendations:
        lines += ["", "**Recommendations**", ""]
        lines += [f"- `{r.id}`: {_escape(r.message)}" for r in result.recommendations]
    return "\n".join(lines)
