"""A markdown summary of one window's result, for TensorBoard's text tab (plain TensorBoard, no plugin).

Text from a trace is inert there: names and paths are code spans (a fence longer than any run of backticks in
them), other text has markdown's punctuation backslash-escaped and ``<>&`` written as entities, so nothing renders
as an image, a link or HTML (TensorBoard's sanitiser lets ``<img src>`` and ``<a href>`` through).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lightning_streamprof.escape import for_terminal
from lightning_streamprof.names import hook_label
from lightning_streamprof.report.hta_sections import hook_rows, hook_sentence
from lightning_streamprof.report.units import ms_text, pct_text
from lightning_streamprof.results import Result

_TOP = 5
#: what markdown (with its tables extension) reads as markup after a backslash
_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _escape(text: str) -> str:
    """``text`` as plain markdown text on one line: punctuation escaped, no HTML, no link, no column break."""
    text = _PUNCTUATION.sub(r"\\\1", for_terminal(text))
    return re.sub("[&<>]", lambda m: _ENTITIES[m.group()], text)


def _code(text: str) -> str:
    """``text`` as a code span on one line: fenced by one backtick more than its longest run of them, padded with a
    space where it starts or ends with a backtick or a backslash (which would take the fence apart)."""
    text = for_terminal(text)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", "\\", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def window_markdown(result: Result, window: int, first_step: int, last_step: int, *,
                    moved: str | None = None, path: str | None = None, cost: str | None = None,
                    notes: Sequence[str] = ()) -> str:
    """GPU metrics, the step breakdown (ms), the top kernels and operators and the recommendations of a window;
    ``moved`` says that the overhead budget moved the window, ``notes`` more of the same kind (its wait for a staging
    callback's choice, the way that callback ran it), ``cost`` what profiling has cost so far."""
    lines = [f"**StreamProfiler window {window}**: steps {first_step}-{last_step}"]
    for line in (moved, *notes):
        if line:
            lines += ["", f"*Note: {_escape(line)}.*"]
    if cost:
        lines += ["", f"*{_escape(cost)}*"]
    if path:
        lines += ["", f"Trace: {_code(path)}"]
    if result.gpu:
        lines += ["", "| device | GPU utilization | Est. SM efficiency | Est. achieved occupancy |",
                  "|---|--:|--:|--:|"]
        lines += [f"| cuda:{g.device} | {pct_text(g.utilization)} | {pct_text(g.sm_efficiency)} |"
                  f" {pct_text(g.achieved_occupancy)} |" for g in result.gpu]
    steps = result.steps
    if steps.count:
        lines += ["", f"Mean step **{steps.mean_ms:.2f} ms** over {steps.count} steps:", "",
                  "| category | ms per step | share |", "|---|--:|--:|"]
        lines += [f"| {_escape(c)} | {v:.3f} | {pct_text(v / steps.mean_ms) if steps.mean_ms else ''} |"
                  for c, v in steps.breakdown_ms.items() if v >= 0.0005]
    if result.kernels:
        lines += ["", "| top kernels | calls | total (ms) |", "|---|--:|--:|"]
        lines += [f"| {_code(_short(k.name))} | {k.calls} | {ms_text(k.total_ns)} |" for k in result.kernels[:_TOP]]
    if result.operators:
        lines += ["", "| top operators | calls | host self (ms) | device self (ms) |", "|---|--:|--:|--:|"]
        lines += [f"| {_code(_short(o.name))} | {o.calls} | {ms_text(o.host_self_ns)} | {ms_text(o.device_self_ns)} |"
                  for o in result.operators[:_TOP]]
    sentence = hook_sentence(result)
    if sentence and result.hta is not None:
        lines += ["", _escape(sentence), "", "| hook | calls | host (ms) | GPU (ms) |", "|---|--:|--:|--:|"]
        lines += [f"| {_code(hook_label(r.name))} | {r.calls} | {ms_text(r.host_ns)} | {ms_text(r.self_kernel_ns)} |"
                  for r in hook_rows(result.hta.hooks)[:_TOP]]
    if result.recommendations:
        lines += ["", "**Recommendations**", ""]
        lines += [f"- {_code(r.id)}: {_escape(r.message)}" for r in result.recommendations]
    return "\n".join(lines)
