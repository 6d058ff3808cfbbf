"""Why a window was recorded outside its schedule, and what changed against the last normal window.

A :class:`WindowTrigger` travels in the trace's ``streamprof`` metadata (so a post-hoc reader finds it); the
:class:`SlowdownExplanation` of a triggered window is computed from two analysed windows by :func:`explain` (a pure
function of results), the live run's and ``streamprof compare``'s alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

#: why a window was recorded: the step-time watch saw the run slow down, someone asked for it, or the watch wanted a
#: normal window to compare a later slow one with
SLOWDOWN, REQUEST, REFERENCE = "slowdown", "request", "reference"
#: the changed operators and kernels an explanation keeps (the largest changes)
TOP_CHANGES = 8


class _Struct(msgspec.Struct, frozen=True, kw_only=True):
    """Immutable, keyword-built."""


class WindowTrigger(_Struct):
    """Why a window was recorded: ``reason`` (:data:`SLOWDOWN`, :data:`REQUEST`, :data:`REFERENCE`); for a slowdown
    the global step it started at (``step``) and the median step time before (``baseline_ms``) and since
    (``recent_ms``); for a request, how it came (``via``: ``"marker"`` or ``"signal"``) and the step it was seen at."""

    reason: str
    step: int | None = None
    baseline_ms: float | None = None
    recent_ms: float | None = None
    via: str | None = None


class Stall(_Struct):
    """One step that took ``ms``, at least the stall factor times the run's median step (``median_ms``)."""

    step: int
    ms: float
    median_ms: float


class Change(_Struct):
    """One quantity in the normal window (``before``) and the triggered one (``after``), ms per step; None where a
    window has none."""

    name: str
    before: float | None
    after: float | None

    @property
    def delta(self) -> float:
        return (self.after or 0.0) - (self.before or 0.0)


class SlowdownExplanation(_Struct):
    """A triggered window against the last normal window of the run: the mean step, each step-breakdown category,
    the operators and kernels whose time per step changed most, and GPU utilization (fractions; None without GPU
    work)."""

    trigger: WindowTrigger
    normal_window: int | None
    window: int | None
    step: Change
    categories: list[Change]
    operators: list[Change]
    kernels: list[Change]
    utilization: tuple[float | None, float | None] = (None, None)

    @property
    def grown(self) -> Change | None:
        """The breakdown category that grew most (None when none grew)."""
        grew = [c for c in self.categories if c.delta > 0]
        return max(grew, key=lambda c: c.delta) if grew else None


def _per_step(rows: Iterable[tuple[str, float]], steps: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, ns in rows:
        out[name] = out.get(name, 0.0) + ns / 1e6 / max(steps, 1)
    return out


def _largest(before: dict[str, float], after: dict[str, float], top: int) -> list[Change]:
    names = sorted(set(before) | set(after), key=lambda n: (-abs(after.get(n, 0.0) - before.get(n, 0.0)), n))
    return [Change(name=n, before=before.get(n), after=after.get(n)) for n in names[:top]
            if after.get(n, 0.0) != before.get(n, 0.0)]


def _utilization(result) -> float | None:
    span = sum(g.span_ns for g in result.gpu)
    return sum(g.kernel_ns for g in result.gpu) / span if span else None


def explain(normal, slow, trigger: WindowTrigger, top: int = TOP_CHANGES) -> SlowdownExplanation:
    """The triggered window's analysis ``slow`` against the normal window's ``normal`` (two
    :class:`~lightning_streamprof.results.Result`), by ``trigger``."""
    from lightning_streamprof.results.schema import CATEGORIES

    a, b = normal.steps, slow.steps
    ops = [_per_step(((o.name, o.host_self_ns + o.device_self_ns) for o in r.operators), r.steps.count)
           for r in (normal, slow)]
    kernels = [_per_step(((k.name, k.total_ns) for k in r.kernels), r.steps.count) for r in (normal, slow)]
    return SlowdownExplanation(
        trigger=trigger, normal_window=_window(normal), window=_window(slow),
        step=Change(name="step", before=a.mean_ms if a.count else None, after=b.mean_ms if b.count else None),
        categories=[Change(name=c, before=a.breakdown_ms.get(c) if a.count else None,
                           after=b.breakdown_ms.get(c) if b.count else None) for c in CATEGORIES],
        operators=_largest(*ops, top), kernels=_largest(*kernels, top),
        utilization=(_utilization(normal), _utilization(slow)))


def _window(result) -> int | None:
    return next((t.window for t in result.traces if t.window is not None), None)


def trigger_of(result) -> WindowTrigger | None:
    """The trigger recorded in a result's traces (None for a window of the schedule)."""
    return next((t.trigger for t in result.traces if getattr(t, "trigger", None) is not None), None)


def slowdown_pairs(windows: Sequence) -> list[tuple[object, object, WindowTrigger]]:
    """``(normal, slow, trigger)`` for each slowdown window of a run's ``windows``
    (:class:`~lightning_streamprof.results.WindowResults`): its result and that of the last window before it that no
    slowdown triggered (the comparison ``streamprof compare`` and the report choose)."""
    from lightning_streamprof.results.merge import merge

    out, normal = [], None
    for w in sorted(windows, key=lambda w: (w.window is None, w.window or 0)):
        if not w.ranks:
            continue
        result = w.ranks[0] if len(w.ranks) == 1 else merge(w.ranks)
        trigger = trigger_of(result)
        if trigger is None or trigger.reason != SLOWDOWN:
            normal = result
        elif normal is not None:
            out.append((normal, result, trigger))
    return out


def explanations(windows: Sequence) -> list[SlowdownExplanation]:
    """Each slowdown window of ``windows`` against the last normal window before it (:func:`slowdown_pairs`)."""
    return [explain(normal, slow, trigger) for normal, slow, trigger in slowdown_pairs(windows)]


class RunTriggers(_Struct):
    """What the step-time watch and the requests did in a stage: the windows recorded off the schedule and why
    (``triggers``), each slowdown's explanation, the single stalls (``more_stalls`` beyond those listed, of at
    least ``stall_factor`` times the median) and ``notes``, the lines saying why the watch or the requests are off
    where they are."""

    triggers: dict[int, WindowTrigger] = {}
    explained: list[SlowdownExplanation] = []
    stalls: list[Stall] = []
    more_stalls: int = 0
    stall_factor: float = 10.0
    notes: list[str] = []
