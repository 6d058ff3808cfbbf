"""Recommendations grouped by kind: one message per kind (the run's, from its merged numbers) and the evidence of
each trace (window and rank) that has the same finding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_streamprof.results import Recommendation, Result, WindowResults


@dataclass(frozen=True)
class Finding:
    """One kind of recommendation: its message, the merged evidence, and ``(trace label, evidence line)`` per
    trace (the line is never empty)."""

    id: str
    message: str
    evidence: dict[str, Any]
    per_trace: list[tuple[str, str]] = field(default_factory=list)


def trace_label(result: Result) -> str:
    """``window W (step S), rank R`` of a single-trace result; its path's file name otherwise."""
    t = result.traces[0] if result.traces else None
    if t is None:
        return "trace"
    parts = []
    if t.window is not None:
        parts.append(f"window {t.window}" + (f" (step {t.first_step})" if t.first_step is not None else ""))
    if t.rank is not None:
        parts.append(f"rank {t.rank}")
    return ", ".join(parts) or t.path.rsplit("/", 1)[-1]


def _key(rec: Recommendation) -> tuple[str, str]:
    """Recommendations of one kind; ``stream_pipeline`` findings differ by what they are about."""
    return rec.id, str(rec.evidence.get("what", ""))


def findings(result: Result, windows: Sequence[WindowResults] = ()) -> list[Finding]:
    """The merged result's recommendations, one per kind, with each trace's evidence for the same kind; a kind
    found only in some traces (not in the merged numbers) is listed after them with its first message."""
    traces = [r for w in windows for r in w.ranks] if len(result.traces) > 1 else []
    per: dict[tuple[str, str], list[tuple[str, Recommendation]]] = {}
    for r in traces:
        for rec in r.recommendations:
            per.setdefault(_key(rec), []).append((trace_label(r), rec))
    out: list[Finding] = []
    seen = set()
    for rec in result.recommendations:
        key = _key(rec)
        if key in seen:
            continue
        seen.add(key)
        evidence = [(label, evidence_line(found)) for label, found in per.get(key, [])]
        out.append(Finding(rec.id, rec.message, dict(rec.evidence), evidence))
    for key, found in per.items():
        if key not in seen:
            first = found[0][1]
            where = "; ".join(label for label, _ in found)
            message = f"In {where} only (not in the run as a whole): {first.message}"
            out.append(Finding(first.id, message, dict(first.evidence), [(lbl, evidence_line(x)) for lbl, x in found]))
    return out


def evidence_line(rec: Recommendation) -> str:
    """A finding's numbers in a few words: its ``summary``, else its scalar evidence, else its message's first
    sentence (never empty)."""
    return rec.summary or evidence_text(rec.evidence) or rec.message.split(". ", 1)[0].rstrip(".")


def evidence_text(evidence: dict[str, Any], limit: int = 6) -> str:
    """The numbers of an evidence dict, ``key value`` pairs (a list's values joined) with shares and utilization
    in % and ``_ms`` keys in ms."""
    parts = []
    for key, value in evidence.items():
        values = value if isinstance(value, list) else [value]
        shown = [_number(key, v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if shown:
            words = " ".join(w for w in key.split("_") if w != "ms")
            parts.append(f"{words} {', '.join(shown)}")
        if len(parts) >= limit:
            break
    return ", ".join(parts)


def _number(key: str, value: float) -> str:
    if key in ("share", "utilization") or key.endswith("_share"):
        return f"{100 * value:.1f}%"
    if "ms" in key.split("_"):
        return f"{value:.3f} ms"
    return f"{value:.4g}"
