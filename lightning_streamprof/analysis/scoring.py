"""Cross-rank scoring: a pure function of the gathered per-rank table (:class:`RankWindow` rows), no torch.

Definitions (DESIGN.md §5, torch-tb-profiler's distributed view and NVIDIA resiliency-ext's scores):

- **Matching**: a collective call is the same call on every rank when its process group, name and sequence
  number (``Seq``) agree; traces without sequence numbers (gloo) match by group, name, step number and
  occurrence within the step. Never by order in the trace, so calls that start in another order on another
  rank still match.
- **Synchronizing vs transfer**: a matched call's transfer time is its shortest duration over the ranks; the
  rest of each rank's duration is waiting for the others, at the start of the call. Per step, ``sync`` is
  the merged waiting time and ``transfer`` the rest of the merged collective time.
- **Scores**: a rank's own time per step is the step less its waiting (``own = step - sync``). Relative score
  = the fastest rank's median own time / this rank's; individual score = this rank's best window median /
  its current one. A relative score below ``threshold`` (0.75) flags a straggler.
- **Late starts**: at each matched call, the rank with the shortest duration arrived last; the others
  waited ``their duration - the shortest`` for it (clock-free: needs no aligned clocks across hosts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis.straggler_message import explain
from lightning_streamprof.results import (
    CommOpStats,
    DistributedStats,
    DistributedWindow,
    LateStart,
    RankStats,
    RankWindow,
    WaitedFor,
)

THRESHOLD = 0.75


@dataclass
class _PerStep:
    """Per-step arrays of every rank of one window, concatenated (``rank`` says whose)."""

    rank: np.ndarray
    step_ns: np.ndarray
    comp: np.ndarray
    comm: np.ndarray
    overlap: np.ndarray
    loader: np.ndarray
    sync: np.ndarray
    transfer: np.ndarray


@dataclass
class _Calls:
    """Every rank's collective calls, one row per (rank, matched call)."""

    key: np.ndarray
    rank: np.ndarray
    name: np.ndarray
    group: np.ndarray
    seq: np.ndarray
    step: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    bytes: np.ndarray


def _intern(tables: Sequence[Sequence[str]], columns: Sequence[Sequence[int]]) -> tuple[list[str], np.ndarray]:
    """Per-rank string tables merged: the global table and every row's global id."""
    out: dict[str, int] = {}
    ids = []
    for table, column in zip(tables, columns):
        local = np.array([out.setdefault(s, len(out)) for s in table] or [0], np.int64)
        ids.append(local[np.asarray(column, np.int64)] if len(column) else np.zeros(0, np.int64))
    return list(out), np.concatenate(ids) if ids else np.zeros(0, np.int64)


def _match_keys(seq: np.ndarray, group: np.ndarray, name: np.ndarray, step: np.ndarray,
                occurrence: np.ndarray) -> np.ndarray:
    """One id per distinct call: (group, name, seq), or (group, name, step, occurrence) without a sequence number."""
    if not seq.size:
        return np.zeros(0, np.int64)
    with_seq = seq >= 0
    position = np.where(with_seq, seq, step + 1)  # step -1 (outside steps) -> 0
    nth = np.where(with_seq, 0, occurrence)
    if (group.max() < 1 << 8 and name.max() < 1 << 10 and position.max() < 1 << 34 and nth.max() < 1 << 10
            and position.min() >= 0):
        packed = ((((~with_seq).astype(np.int64) << 8 | group) << 10 | name) << 34 | position) << 10 | nth
        _, key = np.unique(packed, return_inverse=True)
    else:
        _, key = np.unique(np.stack([(~with_seq).astype(np.int64), group, name, position, nth], axis=1), axis=0,
                           return_inverse=True)
    return key.reshape(-1)


def _calls(rows: Sequence[RankWindow]) -> tuple[_Calls, list[str], list[str]]:
    cs = [r.collectives for r in rows]
    names, name = _intern([c.names for c in cs], [c.name for c in cs])
    groups, group = _intern([c.groups for c in cs], [c.group for c in cs])
    rank = np.concatenate([np.full(len(c), i, np.int64) for i, c in enumerate(cs)]) if cs else np.zeros(0, np.int64)

    def col(attr: str) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(c, attr), np.int64) for c in cs]) if cs else np.zeros(0, np.int64)

    seq, occurrence = col("seq"), col("occurrence")
    numbers = [np.asarray(r.step_numbers or [0], np.int64) for r in rows]
    step = np.concatenate([np.where(np.asarray(c.step, np.int64) >= 0,
                                    numbers[i][np.clip(np.asarray(c.step, np.int64), 0, None)], -1) if len(c) else
                           np.zeros(0, np.int64) for i, c in enumerate(cs)]) if cs else np.zeros(0, np.int64)
    start, dur, nbytes = col("start_ns"), col("dur_ns"), col("bytes")
    key = _match_keys(seq, group, name, step, occurrence)
    # one row per (rank, call): a call timed by several events spans them all
    composite = key * max(len(rows), 1) + rank
    uniq, first, inverse = np.unique(composite, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    lo = np.full(uniq.size, np.iinfo(np.int64).max)
    hi = np.full(uniq.size, np.iinfo(np.int64).min)
    np.minimum.at(lo, inverse, start)
    np.maximum.at(hi, inverse, start + dur)
    calls = _Calls(key=key[first], rank=rank[first], name=name[first], group=group[first], seq=seq[first],
                   step=step[first], start=lo, dur=hi - lo, bytes=nbytes[first])
    return calls, names, groups


def _transfer(calls: _Calls) -> tuple[np.ndarray, np.ndarray]:
    """Per call row: the call's transfer time (shortest duration over ranks) and how many ranks have it."""
    n = int(calls.key.max()) + 1 if calls.key.size else 0
    shortest = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(shortest, calls.key, calls.dur)
    ranks = np.bincount(calls.key, minlength=n)
    return shortest[calls.key], ranks[calls.key]


def _per_step(rows: Sequence[RankWindow], calls: _Calls, wait: np.ndarray) -> _PerStep:
    """Merged waiting and collective time in each step of each rank, in one vectorised pass: every rank's
    times are shifted onto its own stretch of one timeline."""
    starts = [np.asarray(r.step_start_ns, np.int64) for r in rows]
    ends = [np.asarray(r.step_end_ns, np.int64) for r in rows]
    n = len(rows)
    base = np.array([int(s.min()) if s.size else np.iinfo(np.int64).max for s in starts], np.int64)
    reach = np.array([int(e.max()) if e.size else np.iinfo(np.int64).min for e in ends], np.int64)
    if calls.rank.size:
        np.minimum.at(base, calls.rank, calls.start)
        np.maximum.at(reach, calls.rank, calls.start + calls.dur)
    empty = base > reach
    base[empty], reach[empty] = 0, 0
    span = int((reach - base).max(initial=0)) + 1
    offset = np.arange(n, dtype=np.int64) * span - base
    lo = np.concatenate([s + offset[i] for i, s in enumerate(starts)]) if rows else np.zeros(0, np.int64)
    hi = np.concatenate([e + offset[i] for i, e in enumerate(ends)]) if rows else np.zeros(0, np.int64)
    shifted = calls.start + offset[calls.rank] if calls.rank.size else calls.start
    coll = iv.integrate(*iv.merge(shifted, shifted + calls.dur), None, lo, hi)
    sync = iv.integrate(*iv.merge(shifted, shifted + wait), None, lo, hi)

    def cat(attr: str) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(r, attr), np.int64) for r in rows]) if rows else np.zeros(0, np.int64)

    return _PerStep(rank=np.concatenate([np.full(len(s), r.rank, np.int64) for s, r in zip(starts, rows)])
                    if rows else np.zeros(0, np.int64),
                    step_ns=hi - lo, comp=cat("comp_ns"), comm=cat("comm_ns"), overlap=cat("overlap_ns"),
                    loader=cat("dataloader_ns"), sync=sync.astype(np.int64), transfer=(coll - sync).astype(np.int64))


def _group_means(per: _PerStep) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Per rank (sorted ranks): step count, means (ms) of every per-step column and the median own time (ms)."""
    ranks, inverse = np.unique(per.rank, return_inverse=True)
    inverse = inverse.reshape(-1)
    counts = np.bincount(inverse, minlength=ranks.size)
    means = {}
    for f in ("step_ns", "comp", "comm", "overlap", "loader", "sync", "transfer"):
        sums = np.bincount(inverse, weights=getattr(per, f).astype(np.float64), minlength=ranks.size)
        means[f] = sums / np.maximum(counts, 1) / 1e6
    own = (per.step_ns - per.sync).astype(np.float64)
    order = np.lexsort((own, inverse))
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]) if ranks.size else np.zeros(0, np.int64)
    lo = own[order][first + (counts - 1) // 2] if ranks.size else np.zeros(0)
    hi = own[order][first + counts // 2] if ranks.size else np.zeros(0)
    return ranks, counts, means, (lo + hi) / 2 / 1e6


def _ranks(per: _PerStep, hosts: Mapping[int, str | None], window: int | None,
           individual: Mapping[int, float | None], threshold: float) -> list[RankStats]:
    """Every rank's stats: means per step, median own time and scores against the fastest rank."""
    ranks, counts, means, medians = _group_means(per)
    positive = medians[medians > 0]
    fastest = float(positive.min()) if positive.size else 0.0
    m = {k: v.tolist() for k, v in means.items()}
    median_own, counts = medians.tolist(), counts.tolist()
    out = []
    for i, rank in enumerate(ranks.tolist()):
        step, comp, comm, overlap = m["step_ns"][i], m["comp"][i], m["comm"][i], m["overlap"][i]
        sync, transfer, loader, med = m["sync"][i], m["transfer"][i], m["loader"][i], float(median_own[i])
        relative = fastest / med if med > 0 and fastest > 0 else 1.0
        out.append(RankStats(
            rank=rank, host=hosts.get(rank), window=window, steps=int(counts[i]), step_ms=step,
            computation_ms=comp - overlap, overlap_ms=overlap, communication_ms=comm - overlap,
            other_ms=step - comp - comm + overlap, sync_ms=sync, transfer_ms=transfer, dataloader_ms=loader,
            compute_ms=comp, host_ms=max(0.0, step - sync - comp - loader - transfer), own_ms=step - sync,
            median_own_ms=med, relative_score=min(relative, 1.0), individual_score=individual.get(rank),
            straggler=relative < threshold,
        ))
    return out


@dataclass
class _Window:
    stats: DistributedWindow
    per: _PerStep
    hosts: dict[int, str | None]
    late: list[LateStart]
    ops: list[CommOpStats]
    waits: dict[int, tuple[int, int]]
    matched: int


def _late_starts(calls: _Calls, wait: np.ndarray, matched: np.ndarray, ranks: np.ndarray, names: list[str],
                 groups: list[str], window: int | None) -> list[LateStart]:
    out = []
    if not calls.key.size:
        return out
    keys = np.unique(calls.key[matched >= 2])
    order = np.lexsort((calls.dur, calls.key))
    starts = np.flatnonzero(np.r_[True, np.diff(calls.key[order]) != 0])
    first_of_key = dict(zip(calls.key[order[starts]].tolist(), order[starts].tolist()))
    max_wait = np.zeros(int(calls.key.max()) + 1, np.int64)
    sum_wait = np.zeros_like(max_wait)
    np.maximum.at(max_wait, calls.key, wait)
    np.add.at(sum_wait, calls.key, wait)
    for k in keys.tolist():
        if max_wait[k] <= 0:
            continue
        i = first_of_key[k]
        n = int(matched[i])
        out.append(LateStart(window=window, step=int(calls.step[i]) if calls.step[i] >= 0 else None,
                             group=groups[calls.group[i]], seq=int(calls.seq[i]) if calls.seq[i] >= 0 else None,
                             name=names[calls.name[i]], ranks=n, late_rank=int(ranks[calls.rank[i]]),
                             max_wait_ns=int(max_wait[k]), mean_wait_ns=float(sum_wait[k]) / (n - 1)))
    return out


def _score_window(rows: Sequence[RankWindow], threshold: float, best: Mapping[int, float],
                  world_size: int | None) -> _Window:
    rows = list({r.rank: r for r in reversed(rows)}.values())[::-1]  # one row per rank, the first given
    rows.sort(key=lambda r: r.rank)
    ranks = np.array([r.rank for r in rows], np.int64)
    calls, names, groups = _calls(rows)
    transfer, matched = _transfer(calls)
    wait = np.where(matched >= 2, calls.dur - transfer, 0)
    per = _per_step(rows, calls, wait)
    _, _, _, median_own = _group_means(per)
    individual = {}
    for rank, current in zip(ranks.tolist(), median_own.tolist()):
        prior = best.get(rank)
        individual[rank] = (min(prior, current) / current) if prior is not None and current > 0 else None
    hosts = {r.rank: r.host for r in rows}
    stats = _ranks(per, hosts, rows[0].window if rows else None, individual, threshold)
    window = rows[0].window if rows else None
    late = _late_starts(calls, wait, matched, ranks, names, groups, window)
    waits: dict[int, tuple[int, int]] = {}
    for ls in late:
        c, w = waits.get(ls.late_rank, (0, 0))
        waits[ls.late_rank] = (c + 1, w + ls.max_wait_ns)
    transfer_of = np.where(matched >= 2, transfer, calls.dur)
    ops = _comm_ops(ranks[calls.rank], np.array(names, dtype=object)[calls.name] if names else calls.name,
                    calls.bytes, calls.dur, transfer_of)
    size = world_size or max([r.world_size or 0 for r in rows] + [len(rows)])
    missing = sorted(set(range(size)) - set(ranks.tolist()))
    n_matched = int(np.unique(calls.key[matched >= 2]).size) if calls.key.size else 0
    waited = [WaitedFor(rank=k, collectives=c, wait_ns=w) for k, (c, w) in sorted(waits.items())]
    message = explain(stats, waited, n_matched, threshold)
    stragglers = [s.rank for s in stats if s.straggler]
    return _Window(
        stats=DistributedWindow(window=window, first_step=rows[0].first_step if rows else None, ranks=stats,
                                stragglers=stragglers, missing_ranks=missing, message=message),
        per=per, hosts=hosts, late=late, ops=ops, waits=waits, matched=n_matched,
    )


def _comm_ops(rank: np.ndarray, name: np.ndarray, nbytes: np.ndarray, dur: np.ndarray,
              transfer: np.ndarray) -> list[CommOpStats]:
    """One row per (rank, collective name): calls, bytes (of the calls whose size is known), times."""
    if not rank.size:
        return []
    names, name_id = np.unique(name.astype(str), return_inverse=True)
    key = rank * names.size + name_id.reshape(-1)
    keys, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.reshape(-1)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(inverse, weights=values.astype(np.float64), minlength=keys.size)

    calls, known = total(np.ones_like(dur)).tolist(), total(nbytes >= 0).tolist()
    size, latency, moved = (total(np.where(nbytes >= 0, nbytes, 0)).tolist(), total(dur).tolist(),
                            total(transfer).tolist())
    out = []
    for i, k in enumerate(keys.tolist()):
        n, kn = int(calls[i]), int(known[i])
        out.append(CommOpStats(rank=k // names.size, name=str(names[k % names.size]), calls=n,
                               total_bytes=int(size[i]) if kn else None, mean_bytes=size[i] / kn if kn else None,
                               total_ns=int(latency[i]), mean_ns=latency[i] / n, transfer_ns=int(moved[i]),
                               mean_transfer_ns=moved[i] / n))
    return out


def _merge_ops(ops: Sequence[CommOpStats]) -> list[CommOpStats]:
    """Rows of several windows summed per (rank, name), means recomputed."""
    acc: dict[tuple[int, str], list] = {}
    for o in ops:
        a = acc.setdefault((o.rank, o.name), [0, 0, 0, 0, 0])
        known = 0 if o.total_bytes is None else round(o.total_bytes / o.mean_bytes) if o.mean_bytes else o.calls
        a[0] += o.calls
        a[1] += known
        a[2] += o.total_bytes or 0
        a[3] += o.total_ns
        a[4] += o.transfer_ns
    return [CommOpStats(rank=rank, name=name, calls=n, total_bytes=b if kn else None, mean_bytes=b / kn if kn else None,
                        total_ns=t, mean_ns=t / n, transfer_ns=x, mean_transfer_ns=x / n)
            for (rank, name), (n, kn, b, t, x) in acc.items()]


def _sorted_ops(ops: Sequence[CommOpStats]) -> list[CommOpStats]:
    return sorted(ops, key=lambda o: (o.rank, -o.total_ns, o.name))


def score(summaries: Sequence[RankWindow], threshold: float = THRESHOLD, *, world_size: int | None = None,
          best_median_ms: Mapping[int, float] | None = None, keep_summaries: bool = False) -> DistributedStats:
    """Score a table of per-rank windows (any number of windows and ranks; rows of one window share its index).

    ``best_median_ms`` are earlier windows' best median own times per rank (for the individual scores of a
    live run); ``keep_summaries`` keeps the input rows in the result.
    """
    by_window: dict[tuple, list[RankWindow]] = {}
    for s in summaries:
        by_window.setdefault((s.window is None, s.window or 0, s.first_step or 0), []).append(s)
    best = dict(best_median_ms or {})
    windows: list[_Window] = []
    for key in sorted(by_window):
        w = _score_window(by_window[key], threshold, best, world_size)
        windows.append(w)
        for r in w.stats.ranks:
            if r.steps and r.median_own_ms > 0:
                best[r.rank] = min(best.get(r.rank, r.median_own_ms), r.median_own_ms)
    per = _PerStep(*(np.concatenate([getattr(w.per, f) for w in windows]) if windows else np.zeros(0, np.int64)
                     for f in _PerStep.__dataclass_fields__))
    hosts = {k: v for w in windows for k, v in w.hosts.items()}
    last_individual = {r.rank: r.individual_score for w in windows for r in w.stats.ranks}
    ranks = _ranks(per, hosts, None, last_individual, threshold)
    waits: dict[int, tuple[int, int]] = {}
    for w in windows:
        for k, (c, t) in w.waits.items():
            c0, t0 = waits.get(k, (0, 0))
            waits[k] = (c0 + c, t0 + t)
    waited = [WaitedFor(rank=k, collectives=c, wait_ns=t) for k, (c, t) in sorted(waits.items())]
    late = [ls for w in windows for ls in w.late]
    n_matched = sum(w.matched for w in windows)
    size = world_size or max([s.world_size or 0 for s in summaries] + [len(ranks)])
    return DistributedStats(
        threshold=threshold, world_size=size or None, ranks=ranks, stragglers=[r.rank for r in ranks if r.straggler],
        message=explain(ranks, waited, n_matched, threshold), comm_ops=_sorted_ops(_merge_ops([o for w in windows for o in w.ops])),
        late_starts=late, waited_for=waited, windows=[w.stats for w in windows],
        missing_ranks=sorted({m for w in windows for m in w.stats.missing_ranks}),
        summaries=list(summaries) if keep_summaries else [],
    )
