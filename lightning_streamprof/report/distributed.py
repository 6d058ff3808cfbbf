"""The distributed view of the HTML report, from :class:`~lightning_streamprof.results.DistributedStats`: per-rank
computation / overlap / communication / other bars, synchronizing vs transfer, the collectives by kind and one by
one, the ranks the others waited for and the straggler flags. Without distributed results, a run of several ranks
still gets per-rank bars of the step breakdown from each rank's steps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lightning_streamprof.escape import for_html
from lightning_streamprof.report import svg
from lightning_streamprof.report.page import note, table
from lightning_streamprof.report.units import mib, ms
from lightning_streamprof.results import CATEGORIES, DistributedStats, RankStats, Result, Steps, rank_ranges

PARTS = ("computation", "overlap", "communication", "other")
WAITS = ("sync", "transfer")
_LABELS = {"sync": "synchronizing", "transfer": "transfer", "overlap": "overlapping"}
_BADGE = '<span class="badge">straggler</span>'

_RANK_COLUMNS: Sequence[tuple[str, Callable[[RankStats], Any]]] = (
    ("rank", lambda r: r.rank), ("host", lambda r: r.host), ("step (ms)", lambda r: r.step_ms),
    ("computation (ms)", lambda r: r.computation_ms), ("overlapping (ms)", lambda r: r.overlap_ms),
    ("communication (ms)", lambda r: r.communication_ms), ("other (ms)", lambda r: r.other_ms),
    ("synchronizing (ms)", lambda r: r.sync_ms), ("transfer (ms)", lambda r: r.transfer_ms),
    ("relative score", lambda r: r.relative_score), ("straggler", lambda r: (_BADGE, 1) if r.straggler else None),
)
_KIND_COLUMNS: Sequence[tuple[str, Callable[[dict[str, Any]], Any]]] = (
    ("rank", lambda k: k["rank"]), ("kind", lambda k: k["kind"]), ("calls", lambda k: k["calls"]),
    ("total (ms)", lambda k: ms(k["total_ns"])),
    ("hidden (ms)", lambda k: None if k["hidden_ns"] is None else ms(k["hidden_ns"])),
    ("exposed (ms)", lambda k: None if k["hidden_ns"] is None else ms(k["total_ns"] - k["hidden_ns"])),
    ("transfer (ms)", lambda k: ms(k["transfer_ns"])),
)
_OP_COLUMNS = (
    ("rank", lambda o: o.rank), ("name", lambda o: o.name), ("calls", lambda o: o.calls),
    ("total (MiB)", lambda o: None if o.total_bytes is None else mib(o.total_bytes)),
    ("mean (MiB)", lambda o: None if o.mean_bytes is None else mib(o.mean_bytes)),
    ("total (ms)", lambda o: ms(o.total_ns)), ("mean (ms)", lambda o: ms(o.mean_ns)),
    ("transfer (ms)", lambda o: ms(o.transfer_ns)), ("mean transfer (ms)", lambda o: ms(o.mean_transfer_ns)),
    ("kind", lambda o: o.kind), ("hidden (ms)", lambda o: None if o.hidden_ns is None else ms(o.hidden_ns)),
    ("exposed (ms)", lambda o: None if o.exposed_ns is None else ms(o.exposed_ns)),
)
_WAITED_COLUMNS = (("rank", lambda w: w.rank), ("collectives", lambda w: w.collectives),
                   ("wait (ms)", lambda w: ms(w.wait_ns)))


def collectives_by_kind(stats: DistributedStats) -> list[dict[str, Any]]:
    """The collectives summed per (rank, kind: all-gather, reduce-scatter...): calls, total, hidden (overlapped
    by computation; None when not measured) and transfer time (ns), in rank then kind order."""
    acc: dict[tuple[int, str], dict[str, Any]] = {}
    for o in stats.comm_ops:
        kind = o.kind or "other"
        row = acc.setdefault((o.rank, kind), {"rank": o.rank, "kind": kind, "calls": 0, "total_ns": 0,
                                               "hidden_ns": 0, "transfer_ns": 0})
        row["calls"] += o.calls
        row["total_ns"] += o.total_ns
        row["transfer_ns"] += o.transfer_ns
        row["hidden_ns"] = None if row["hidden_ns"] is None or o.hidden_ns is None else row["hidden_ns"] + o.hidden_ns
    return sorted(acc.values(), key=lambda r: (r["rank"], r["kind"]))


def _ranks_from_steps(result: Result) -> list[tuple[str, dict[str, float]]]:
    ranks = sorted({s.rank for s in result.steps.per_step if s.rank is not None})
    return [(f"rank {rank}", dict(Steps.of([s for s in result.steps.per_step if s.rank == rank]).breakdown_ms))
            for rank in ranks]


def _from_steps(result: Result) -> str:
    """Per-rank bars of the step breakdown, for a run of several ranks without distributed results."""
    ranks = _ranks_from_steps(result)
    if len(ranks) < 2:
        return ""
    return (note("Step breakdown of each rank, from its steps (the computation / communication overlap "
                 "and the straggler scores come with the distributed analysis).")
            + svg.legend(CATEGORIES) + svg.stacked_bars(ranks, CATEGORIES))


def _hosts_note(stats: DistributedStats) -> str:
    """How many ranks on how many hosts, and which ranks left no trace (when there are several hosts or a gap)."""
    hosts = sorted({r.host for r in stats.ranks if r.host})
    if len(hosts) <= 1 and not stats.missing_ranks:
        return ""
    text = f"{len(stats.ranks)} ranks on {len(hosts)} host{'s' if len(hosts) != 1 else ''}" + (
        f" ({', '.join(hosts[:8])}{', ...' if len(hosts) > 8 else ''})" if hosts else "")
    if stats.missing_ranks:
        text += (f"; no trace of rank(s) {rank_ranges(stats.missing_ranks)} "
                 "(another host's directory? `streamprof report DIR_A DIR_B ...` merges them)")
    return note(text + ".")


def render(result: Result) -> str:
    """The distributed section's HTML; empty for a single-rank run without distributed results."""
    stats = result.distributed
    if stats is None or not stats.ranks:
        return _from_steps(result)
    flagged = set(stats.stragglers)
    bars = [(f"rank {r.rank}" + (" (straggler)" if r.rank in flagged else ""),
             {p: getattr(r, f"{p}_ms") for p in PARTS}) for r in stats.ranks]
    waits = [(f"rank {r.rank}", {p: getattr(r, f"{p}_ms") for p in WAITS}) for r in stats.ranks]
    parts = [f'<p class="warn">{for_html(stats.message)}</p>' if stats.message else "",
             svg.legend(PARTS, _LABELS), svg.stacked_bars(bars, PARTS)]
    if any(sum(v.values()) > 0 for _, v in waits):
        parts += ["<h3>Communication: synchronizing vs transfer (ms per step)</h3>", svg.legend(WAITS, _LABELS),
                  svg.stacked_bars(waits, WAITS)]
    if stats.stragglers:
        parts.append(f"<p>{_BADGE} " + for_html(", ".join(f"rank {r}" for r in stats.stragglers)) + "</p>")
    parts += ["<h3>Per rank</h3>" + table(_RANK_COLUMNS, stats.ranks), _hosts_note(stats)]
    kinds = collectives_by_kind(stats)
    if kinds:
        parts.append("<h3>Collectives by kind: hidden behind computation vs exposed</h3>" + table(_KIND_COLUMNS, kinds))
    if stats.comm_ops:
        parts.append("<h3>Collectives</h3>" + table(_OP_COLUMNS, stats.comm_ops, 50))
    if stats.waited_for:
        parts.append("<h3>Ranks the others waited for</h3>" + table(_WAITED_COLUMNS, stats.waited_for, 50))
    return "".join(parts)
