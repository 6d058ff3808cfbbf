"""The distributed view: per-rank computation / overlap / communication / other bars, synchronizing vs transfer,
the collectives table and straggler flags.

It reads ``Result.distributed`` defensively, as plain data (a msgspec struct or a dict): ``ranks`` (or
``per_rank``), a list of ``{rank, step_ms, computation_ms, overlap_ms, communication_ms, other_ms, sync_ms,
transfer_ms, relative_score, straggler}``; ``stragglers``, a list of ranks (or of dicts with a ``rank``); and
``comm_ops`` and ``waited_for``, lists of flat dicts shown as tables (``*_ns`` in ms); ``message``, a sentence
about the straggler. Missing keys are left empty (the shape of
:class:`~lightning_streamprof.results.distributed.DistributedStats` where it exists). Without it, a run of several
ranks still gets per-rank bars of the step breakdown from each rank's steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

import msgspec

from lightning_streamprof.report import svg
from lightning_streamprof.report.page import note, table
from lightning_streamprof.results import CATEGORIES, Result, Steps, rank_ranges

PARTS = ("computation", "overlap", "communication", "other")
WAITS = ("sync", "transfer")
_LABELS = {"sync": "synchronizing", "transfer": "transfer", "overlap": "overlapping"}


def as_data(value: Any) -> Any:
    """A struct as builtins (dicts and lists); dicts and lists as they are."""
    if isinstance(value, msgspec.Struct):
        return msgspec.to_builtins(value)
    return value


def rank_rows(distributed: Any) -> list[dict[str, Any]]:
    """The per-rank rows of the distributed result, each a dict (empty when there are none)."""
    data = as_data(distributed)
    if not isinstance(data, Mapping):
        return []
    rows = data.get("ranks", data.get("per_rank"))
    return [r for r in (as_data(x) for x in rows or []) if isinstance(r, Mapping)]


def stragglers(distributed: Any) -> list[Any]:
    """The ranks flagged as stragglers: the ``stragglers`` list, else the rows with ``straggler`` true."""
    data = as_data(distributed)
    listed = data.get("stragglers") if isinstance(data, Mapping) else None
    if listed:
        return [x.get("rank", x) if isinstance(x, Mapping) else x for x in (as_data(i) for i in listed)]
    return [r.get("rank") for r in rank_rows(distributed) if r.get("straggler")]


def comm_ops(distributed: Any) -> list[dict[str, Any]]:
    data = as_data(distributed)
    ops = data.get("comm_ops") if isinstance(data, Mapping) else None
    return [o for o in (as_data(x) for x in ops or []) if isinstance(o, Mapping)]


def collectives_by_kind(distributed: Any) -> list[dict[str, Any]]:
    """The collectives summed per (rank, kind: all-gather, reduce-scatter...): calls, total, hidden (overlapped
    by computation; None when not measured) and transfer time (ns), in rank then kind order."""
    acc: dict[tuple[Any, str], dict[str, Any]] = {}
    for o in comm_ops(distributed):
        row = acc.setdefault((o.get("rank"), str(o.get("kind") or "other")),
                             {"rank": o.get("rank"), "kind": str(o.get("kind") or "other"), "calls": 0, "total_ns": 0,
                              "hidden_ns": 0, "transfer_ns": 0})
        row["calls"] += int(_number(o, "calls"))
        row["total_ns"] += int(_number(o, "total_ns"))
        row["transfer_ns"] += int(_number(o, "transfer_ns"))
        hidden = o.get("hidden_ns")
        row["hidden_ns"] = None if row["hidden_ns"] is None or not isinstance(hidden, (int, float)) else \
            row["hidden_ns"] + int(hidden)
    return sorted(acc.values(), key=lambda r: (r["rank"] if isinstance(r["rank"], int) else -1, r["kind"]))


def _number(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _generic_table(rows: list[dict[str, Any]], limit: int = 50) -> str:
    """A table of flat dicts: one column per scalar key; ``*_ns`` values shown in ms, ``*_bytes`` in MiB."""
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys and not isinstance(r[k], (dict, list))]

    def column(key: str) -> tuple[str, Any]:
        for suffix, unit, scale in (("_ns", "ms", 1e6), ("_bytes", "MiB", 2**20)):
            if key.endswith(suffix):
                words = key[: -len(suffix)].replace("_", " ")
                return (f"{words} ({unit})",
                        lambda r: None if not isinstance(r.get(key), (int, float)) else r[key] / scale)
        return key.replace("_", " "), lambda r: r.get(key)

    return table([column(k) for k in keys], rows, limit)


def _ranks_from_steps(result: Result) -> list[tuple[str, dict[str, float]]]:
    ranks = sorted({s.rank for s in result.steps.per_step if s.rank is not None})
    out = []
    for rank in ranks:
        steps = Steps.of([s for s in result.steps.per_step if s.rank == rank])
        out.append((f"rank {rank}", dict(steps.breakdown_ms)))
    return out


def render(result: Result) -> str:
    """The distributed section's HTML; empty for a single-rank run without distributed results."""
    rows = rank_rows(result.distributed)
    if not rows:
        ranks = _ranks_from_steps(result)
        if len(ranks) < 2:
            return ""
        return (note("Step breakdown of each rank, from its steps (the computation / communication overlap "
                     "and the straggler scores come with the distributed analysis).")
                + svg.legend(CATEGORIES) + svg.stacked_bars(ranks, CATEGORIES))
    flagged = stragglers(result.distributed)
    bars = [(f"rank {r.get('rank', '?')}" + (" (straggler)" if r.get("rank") in flagged else ""),
             {p: _number(r, f"{p}_ms") for p in PARTS}) for r in rows]
    waits = [(f"rank {r.get('rank', '?')}", {p: _number(r, f"{p}_ms") for p in WAITS}) for r in rows]
    parts = [svg.legend(PARTS, _LABELS), svg.stacked_bars(bars, PARTS)]
    if any(sum(v.values()) > 0 for _, v in waits):
        parts += ["<h3>Communication: synchronizing vs transfer (ms per step)</h3>", svg.legend(WAITS, _LABELS),
                  svg.stacked_bars(waits, WAITS)]
    if flagged:
        parts.append('<p><span class="badge">straggler</span> ' + escape(", ".join(f"rank {r}" for r in flagged))
                     + "</p>")
    columns = [
        ("rank", lambda r: r.get("rank")), ("host", lambda r: r.get("host")), ("step (ms)", lambda r: r.get("step_ms")),
        ("computation (ms)", lambda r: r.get("computation_ms")), ("overlapping (ms)", lambda r: r.get("overlap_ms")),
        ("communication (ms)", lambda r: r.get("communication_ms")), ("other (ms)", lambda r: r.get("other_ms")),
        ("synchronizing (ms)", lambda r: r.get("sync_ms")), ("transfer (ms)", lambda r: r.get("transfer_ms")),
        ("relative score", lambda r: r.get("relative_score")),
        ("straggler", lambda r: ('<span class="badge">straggler</span>', 1) if r.get("straggler") else None),
    ]
    parts.append("<h3>Per rank</h3>" + table(columns, rows))
    hosts = sorted({str(r["host"]) for r in rows if r.get("host")})
    data = as_data(result.distributed)
    missing = data.get("missing_ranks") if isinstance(data, Mapping) else None
    if len(hosts) > 1 or missing:
        text = f"{len(rows)} ranks on {len(hosts)} host{'s' if len(hosts) != 1 else ''}" + (
            f" ({', '.join(hosts[:8])}{', ...' if len(hosts) > 8 else ''})" if hosts else "")
        if missing:
            text += (f"; no trace of rank(s) {rank_ranges(int(m) for m in missing if isinstance(m, int))} "
                     "(another host's directory? `streamprof report DIR_A DIR_B ...` merges them)")
        parts.append(note(text + "."))
    kinds = collectives_by_kind(result.distributed)
    if kinds:
        kind_columns = [
            ("rank", lambda k: k["rank"]), ("kind", lambda k: k["kind"]), ("calls", lambda k: k["calls"]),
            ("total (ms)", lambda k: k["total_ns"] / 1e6),
            ("hidden (ms)", lambda k: None if k["hidden_ns"] is None else k["hidden_ns"] / 1e6),
            ("exposed (ms)", lambda k: None if k["hidden_ns"] is None else (k["total_ns"] - k["hidden_ns"]) / 1e6),
            ("transfer (ms)", lambda k: k["transfer_ns"] / 1e6),
        ]
        parts.append("<h3>Collectives by kind: hidden behind computation vs exposed</h3>" + table(kind_columns, kinds))
    ops = comm_ops(result.distributed)
    if ops:
        parts.append("<h3>Collectives</h3>" + _generic_table(ops))
    waited = [w for w in data.get("waited_for") or [] if isinstance(w, Mapping)]
    if waited:
        parts.append("<h3>Ranks the others waited for</h3>" + _generic_table(waited))
    message = data.get("message")
    if isinstance(message, str) and message:
        parts.insert(0, f'<p class="warn">{escape(message)}</p>')
    return "".join(parts)
