"""Terminal text for the profiler's summary: the analysed windows' results, never their traces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from lightning_streamprof.escape import for_terminal
from lightning_streamprof.report.cost import cost_headline, cost_sentence
from lightning_streamprof.report.findings import findings
from lightning_streamprof.report.hta_sections import hook_sentence
from lightning_streamprof.report.tables import OPERATOR_COLUMNS, console, finding_lines, headline_lines, plain, table
from lightning_streamprof.report.slowdown import trigger_note
from lightning_streamprof.results import ChoiceWait, ProfilingCost, Result, RunResults, WindowWay
from lightning_streamprof.results.triggers import WindowTrigger
from lightning_streamprof.words import counted


class Window(Protocol):
    """What the summary reads of an exported window."""

    window: int
    first_step: int
    last_step: int
    path: str
    analysis: Result | None
    pipeline: WindowWay | None


def moved_note(window: int, first_step: int, planned: int | None) -> str | None:
    """The line saying that the overhead budget moved a window, or None when it did not."""
    if planned is None or planned == first_step:
        return None
    return (f"window {window} was moved by the overhead budget (max_overhead) from step {planned} to step "
            f"{first_step}, so that profiling stays within its share of the training time")


def waited_note(wait: ChoiceWait | None) -> str | None:
    """The line saying that a window waited for a staging callback's first choice of way, or None when it did not."""
    if wait is None:
        return None
    steps = f"steps {wait.planned} -> {wait.first_step}"
    if wait.bound is None:
        return (f"window {wait.window} waited {wait.first_step - wait.planned} steps for {wait.waited_for}'s choice "
                f"of way ({steps})")
    return (f"window {wait.window} did not wait longer than {wait.bound} steps for {wait.waited_for}'s choice of way "
            f"({steps}): it recorded before the choice")


def way_note(window: int | None, ways: WindowWay | None) -> str | None:
    """The line saying how a staging callback ran a window's steps: the way, or that the window recorded during
    ``auto``'s trials or before its choice, with the ways it recorded; None without a staging callback's state."""
    if ways is None:
        return None
    first = ways.first
    where = f"window {window}" if window is not None else "the window"
    recorded = ", ".join(ways.ways) or first.way
    if ways.in_trials:
        return (f"{where} recorded during {first.name}'s trials (mode={first.mode}; the way changes from block to "
                f"block, so these steps need not run the way the run settles on): {recorded}")
    if first.deciding:
        return f"{where} recorded before {first.name} chose its way (mode={first.mode}): {recorded}"
    return f"{where}: {first.name} (mode={first.mode}) ran {recorded}"


def settled(ways: WindowWay | None) -> bool:
    """The window ran a chosen way (no trials, no choice under way), or no staging callback said."""
    return ways is None or not (ways.in_trials or ways.first.deciding)


def render_windows(
    windows: Sequence[Window], rank: int = 0, cost: ProfilingCost | None = None, row_limit: int = 10,
    total: int | None = None, shown: int = 3, *,
    run: RunResults | None = None, moves: Mapping[int, int] | None = None,
    waits: Mapping[int, ChoiceWait] | None = None, footer: Sequence[str] = (),
    triggers: Mapping[int, WindowTrigger] | None = None,
) -> str:
    """One short block for each of the last ``shown`` windows (steps, trace path on its own line, GPU metrics,
    step breakdown in ms, top operators), then the recommendations once per kind with each window's evidence
    (from ``run``), then what profiling cost (``cost``) and ``footer`` lines. ``total`` windows were written in all
    (the rest are counted, so the text stays short). A window says when the overhead budget moved it (``moves``), when
    it waited for a staging callback's choice of way (``waits``), the way that callback ran it, and why it was
    recorded off the schedule (``triggers``: a slowdown, a request). Plain text, no
    colour codes, paths never wrapped, trace text escaped."""
    out, buf = console(120)
    total = len(windows) if total is None else total
    head = f"StreamProfiler: {counted(total, 'window')} on rank {rank}"
    if cost is not None:
        head += f", {cost_headline(cost)}"
    plain(out, head)
    latest = sorted(windows, key=lambda r: r.window)[-shown:]
    if total > len(latest) and latest:
        plain(out, f"(the last {len(latest)} shown; `streamprof analyze` on the run's directory reads them all)")
    for res in latest:
        plain(out, f"window {res.window}: steps {res.first_step}-{res.last_step}")
        notes = (trigger_note(res.window, (triggers or {}).get(res.window)),
                 moved_note(res.window, res.first_step, (moves or {}).get(res.window)),
                 waited_note((waits or {}).get(res.window)), way_note(res.window, getattr(res, "pipeline", None)))
        for note in notes:
            if note:
                plain(out, f"  {for_terminal(note)}")
        plain(out, f"  {for_terminal(res.path)}")
        if res.analysis is None:
            plain(out, "  not analysed")
            continue
        for line in headline_lines(res.analysis):
            plain(out, line)
        sentence = hook_sentence(res.analysis)
        if sentence:
            plain(out, f"  {sentence}")
        if run is None:
            for rec in res.analysis.recommendations:
                plain(out, f"  -> [{rec.id}] {for_terminal(rec.message)}")
        rendered = table(None, OPERATOR_COLUMNS, res.analysis.operators, row_limit)
        if rendered is not None:
            out.print(rendered)
    if run is not None:
        lines = finding_lines(findings(run.merged, run.windows))
        if lines:
            analysed = len(run.windows)
            plain(out, "Recommendations (all windows):" if analysed >= total else
                  f"Recommendations (the last {analysed} analysed windows):")
            for line in lines:
                plain(out, line)
    if cost is not None:
        plain(out, cost_sentence(cost))
    for line in footer:
        plain(out, line)
    return buf.getvalue().rstrip()
