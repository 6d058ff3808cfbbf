"""One sentence naming the straggler, its lag and where its extra time goes (from scored ranks only)."""

from __future__ import annotations

from collections.abc import Sequence

from lightning_streamprof.results import RankStats, WaitedFor

#: the parts a straggler's extra own time is split into, and the field of each
PARTS = (("dataloader", "dataloader_ms"), ("compute", "compute_ms"), ("host", "host_ms"),
         ("communication", "transfer_ms"))


def _who(rank: RankStats) -> str:
    return f"rank {rank.rank}" + (f" (host {rank.host})" if rank.host else "")


def explain(ranks: Sequence[RankStats], waited: Sequence[WaitedFor], matched: int, threshold: float) -> str | None:
    """``None`` without a straggler; else which rank, its lag in ms and %, and where its extra time goes."""
    stragglers = [r for r in ranks if r.straggler]
    if not stragglers:
        return None
    slow = min(stragglers, key=lambda r: (r.relative_score, r.rank))
    fast = min((r for r in ranks if r.steps and r.median_own_ms > 0), key=lambda r: (r.median_own_ms, r.rank))
    lag = slow.median_own_ms - fast.median_own_ms
    pct = 100 * lag / fast.median_own_ms if fast.median_own_ms > 0 else 0.0
    head = (f"Ranks {', '.join(str(r.rank) for r in sorted(stragglers, key=lambda r: r.rank))} are stragglers; "
            f"the slowest is {_who(slow)}" if len(stragglers) > 1 else f"{_who(slow)[0].upper()}{_who(slow)[1:]} "
            "is a straggler")
    deltas = sorted(((name, getattr(slow, f) - getattr(fast, f)) for name, f in PARTS), key=lambda p: -p[1])
    where = ", ".join(f"{name} {delta:.2f} ms" for name, delta in deltas if delta >= 0.005) or "no single part"
    text = (f"{head}: relative score {slow.relative_score:.2f} (< {threshold:g}); outside waiting for other ranks "
            f"its steps take {slow.median_own_ms:.2f} ms (median), {lag:.2f} ms (+{pct:.0f}%) more than the "
            f"fastest rank {fast.rank}'s {fast.median_own_ms:.2f} ms; the extra time goes to {where}.")
    waits = next((w for w in waited if w.rank == slow.rank), None)
    others = [r.sync_ms for r in ranks if not r.straggler and r.steps]
    if waits is not None and matched and others:
        text += (f" The other ranks waited for it at {waits.collectives} of {matched} matched collective calls "
                 f"and spend {sum(others) / len(others):.2f} ms per step waiting in collectives.")
    return text
