"""Windows recorded off the schedule, as text and HTML: why each was recorded, a slowdown's window against the last
normal window (one sentence, then the table), and the single stalls."""

from __future__ import annotations

from collections.abc import Sequence

from lightning_streamprof.report.page import note, table
from lightning_streamprof.report.tables import console
from lightning_streamprof.report.units import pct_text
from lightning_streamprof.results.triggers import REFERENCE, REQUEST, SLOWDOWN, Change, SlowdownExplanation, Stall
from lightning_streamprof.results.triggers import WindowTrigger

_TABLE_TITLES = ("Step breakdown", "Operators", "Kernels")


def trigger_note(window: int | None, trigger: WindowTrigger | None) -> str | None:
    """Why ``window`` was recorded off the schedule (None for a scheduled window)."""
    if trigger is None:
        return None
    where = f"window {window}" if window is not None else "the window"
    if trigger.reason == SLOWDOWN:
        return (f"{where} was recorded because the step time rose from {_ms(trigger.baseline_ms)} to "
                f"{_ms(trigger.recent_ms)} ms from step {trigger.step:,}")
    if trigger.reason == REQUEST:
        how = f" (by {trigger.via}" + (f", seen at step {trigger.step:,})" if trigger.step is not None else ")")
        return f"{where} was recorded on request{how if trigger.via else ''}"
    if trigger.reason == REFERENCE:
        return (f"{where} was recorded as the normal window a slowdown is compared with (the run's median step: "
                f"{_ms(trigger.baseline_ms)} ms)")
    return f"{where} was recorded off the schedule ({trigger.reason})"


def _ms(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def explanation_sentence(e: SlowdownExplanation) -> str:
    """One sentence: what grew against the normal window, by how much, and GPU utilization before and after."""
    step = e.step
    head = (f"Window {e.window} against window {e.normal_window} (the last normal one): the step took "
            f"{_ms(step.before, 2)} -> {_ms(step.after, 2)} ms")
    grown = e.grown
    if grown is None:
        head += "; no part of the step breakdown grew"
    else:
        head += (f"; {grown.name} grew most, by {grown.delta:.2f} ms per step ({_ms(grown.before, 2)} -> "
                 f"{_ms(grown.after, 2)} ms)")
    before, after = e.utilization
    if before is not None or after is not None:
        head += f"; GPU utilization {pct_text(before)} -> {pct_text(after)}"
    return head + "."


def _groups(e: SlowdownExplanation) -> list[tuple[str, list[Change]]]:
    categories = [c for c in e.categories if c.before or c.after]
    return [(t, rows) for t, rows in zip(_TABLE_TITLES, (categories, e.operators, e.kernels)) if rows]


def explanation_text(e: SlowdownExplanation, width: int = 120) -> str:
    """The sentence, then a table per group (ms per step in the normal window, the triggered one, and the change)."""
    from rich.table import Table

    out, buf = console(width)
    out.print(explanation_sentence(e), markup=False, highlight=False, soft_wrap=True)
    for title, rows in _groups(e):
        t = Table(title=f"{title} (ms per step)", title_justify="left")
        t.add_column("", justify="left", overflow="fold", max_width=72)
        for header in (f"window {e.normal_window}", f"window {e.window}", "change"):
            t.add_column(header, justify="right", no_wrap=True)
        for r in rows:
            t.add_row(r.name, _ms(r.before, 3), _ms(r.after, 3), f"{r.delta:+.3f}")
        out.print(t)
    return buf.getvalue().rstrip()


def explanation_html(e: SlowdownExplanation) -> str:
    """The sentence, then a sortable table per group."""
    columns = [("", lambda r: r.name), (f"window {e.normal_window} (ms)", lambda r: r.before),
               (f"window {e.window} (ms)", lambda r: r.after), ("change (ms)", lambda r: (f"{r.delta:+.3f}", r.delta))]
    parts = [f"<p>{_escape(trigger_note(e.window, e.trigger) or '')}.</p>", note(explanation_sentence(e))]
    for title, rows in _groups(e):
        parts.append(f"<h3>{title} (ms per step)</h3>" + table(columns, rows))
    return "".join(parts)


def _escape(text: str) -> str:
    from lightning_streamprof.escape import for_html

    return for_html(text)


def stall_lines(stalls: Sequence[Stall], more: int = 0, factor: float = 10.0) -> list[str]:
    """The single stalls (steps of at least ``factor`` times the median): one line, then one per stall with its
    step and duration."""
    if not stalls:
        return []
    lines = [f"Stalls (single steps of at least {factor:g}x the median step): {len(stalls) + more}"]
    lines += [f"  step {s.step:,}: {s.ms:.1f} ms ({s.ms / s.median_ms:.0f}x the median {s.median_ms:.1f} ms)"
              for s in stalls]
    if more:
        lines.append(f"  and {more} more")
    return lines


def section_html(traces: Sequence, windows: Sequence, explained: Sequence[SlowdownExplanation] | None) -> str:
    """The report's section of windows off the schedule: why each was recorded (from the traces' metadata), then
    each slowdown against the last normal window (``explained``, or found among ``windows``); empty without any."""
    from lightning_streamprof.results.triggers import explanations

    seen: dict[int | None, str] = {}
    for t in traces:
        if t.trigger is not None and t.window not in seen:
            seen[t.window] = trigger_note(t.window, t.trigger) or ""
    found = list(explained) if explained is not None else explanations(windows)
    slow = {e.window for e in found}
    lines = [note(line + ".") for w, line in sorted(seen.items(), key=lambda x: x[0] or 0) if w not in slow]
    return "".join(lines) + "".join(explanation_html(e) for e in found)
