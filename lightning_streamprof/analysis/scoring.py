"""Cross-rank scoring: a pure function of the gathered per-rank table (:class:`RankWindow` rows, or their
columnar :class:`~lightning_streamprof.analysis.rank_table.RankTable`), no torch.

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
- **Hidden and exposed communication**: per collective name, the part of its calls' time that overlaps
  computation on that rank (measured when the window is analysed) and the rest.

Every step is vectorised over all ranks at once (no Python loop over calls or steps), so a window of 16,384
ranks scores in about a second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np

from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis.collective_kinds import kind
from lightning_streamprof.analysis.rank_table import RankTable
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
_I64 = np.int64


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
    """Every rank's collective calls, one entry per (row, matched call); ``row`` indexes the window's rows."""

    key: np.ndarray
    row: np.ndarray
    name: np.ndarray
    group: np.ndarray
    seq: np.ndarray
    step: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    bytes: np.ndarray
    hidden: np.ndarray


def _match_keys(seq: np.ndarray, group: np.ndarray, name: np.ndarray, step: np.ndarray,
                occurrence: np.ndarray) -> np.ndarray:
    """One id per distinct call: (group, name, seq), or (group, name, step, occurrence) without a sequence number."""
    if not seq.size:
        return np.zeros(0, _I64)
    with_seq = seq >= 0
    position = np.where(with_seq, seq, step + 1)  # step -1 (outside steps) -> 0
    nth = np.where(with_seq, 0, occurrence)
    if (group.max() < 1 << 8 and name.max() < 1 << 10 and position.max() < 1 << 34 and nth.max() < 1 << 10
            and position.min() >= 0 and group.min() >= 0 and name.min() >= 0 and nth.min() >= 0):
        packed = ((((~with_seq).astype(_I64) << 8 | group) << 10 | name) << 34 | position) << 10 | nth
        _, key = np.unique(packed, return_inverse=True)
    else:
        _, key = np.unique(np.stack([(~with_seq).astype(_I64), group, name, position, nth], axis=1), axis=0,
                           return_inverse=True)
    return key.reshape(-1)


def _calls(t: RankTable) -> _Calls:
    """The window's calls, those timed by several events (coalesced kernels) spanning them all."""
    row = t.call_row
    step_first = np.cumsum(t.steps) - t.steps
    valid = (t.call_step >= 0) & (t.call_step < t.steps[row])
    index = np.where(valid, step_first[row] + t.call_step, 0)
    step = np.where(valid, t.step_number[index], -1) if t.step_number.size else np.full(row.size, -1, _I64)
    key = _match_keys(t.seq, t.call_group, t.call_name, step, t.occurrence)
    del valid, index
    composite = key * max(len(t), 1) + row
    ordered = np.sort(composite)
    if not (ordered[1:] == ordered[:-1]).any():  # one event per call: the columns as they are, no copy
        return _Calls(key=key, row=row, name=t.call_name, group=t.call_group, seq=t.seq, step=step,
                      start=t.call_start, dur=t.call_dur, bytes=t.call_bytes, hidden=t.hidden)
    uniq, first, inverse = np.unique(composite, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    lo = np.full(uniq.size, np.iinfo(_I64).max)
    hi = np.full(uniq.size, np.iinfo(_I64).min)
    np.minimum.at(lo, inverse, t.call_start)
    np.maximum.at(hi, inverse, t.call_start + t.call_dur)
    hidden = np.bincount(inverse, weights=np.maximum(t.hidden, 0), minlength=uniq.size).astype(_I64)
    unknown = np.bincount(inverse, weights=t.hidden < 0, minlength=uniq.size) > 0
    hidden = np.minimum(hidden, hi - lo)  # events of one call that overlap each other
    hidden[unknown] = -1
    return _Calls(key=key[first], row=row[first], name=t.call_name[first], group=t.call_group[first],
                  seq=t.seq[first], step=step[first], start=lo, dur=hi - lo, bytes=t.call_bytes[first], hidden=hidden)


def _transfer(calls: _Calls) -> tuple[np.ndarray, np.ndarray]:
    """Per call: the call's transfer time (shortest duration over ranks) and how many ranks have it."""
    n = int(calls.key.max()) + 1 if calls.key.size else 0
    shortest = np.full(n, np.iinfo(_I64).max)
    np.minimum.at(shortest, calls.key, calls.dur)
    ranks = np.bincount(calls.key, minlength=n)
    return shortest[calls.key], ranks[calls.key]


def _per_step(t: RankTable, calls: _Calls, wait: np.ndarray) -> _PerStep:
    """Merged waiting and collective time in each step of each rank, in one vectorised pass: every rank's
    times are shifted onto its own stretch of one timeline."""
    n, step_row = len(t), t.step_row
    base = np.full(n, np.iinfo(_I64).max)
    reach = np.full(n, np.iinfo(_I64).min)
    np.minimum.at(base, step_row, t.step_start)
    np.maximum.at(reach, step_row, t.step_end)
    if calls.row.size:
        np.minimum.at(base, calls.row, calls.start)
        np.maximum.at(reach, calls.row, calls.start + calls.dur)
    empty = base > reach
    base[empty], reach[empty] = 0, 0
    span = int((reach - base).max(initial=0)) + 1
    offset = np.arange(n, dtype=_I64) * span - base
    lo, hi = t.step_start + offset[step_row], t.step_end + offset[step_row]
    shifted = calls.start + offset[calls.row]
    order = np.argsort(shifted, kind="stable")  # the same starts for both unions
    starts = shifted[order]
    coll = iv.integrate(*iv.merge_sorted(starts, starts + calls.dur[order]), None, lo, hi)
    sync = iv.integrate(*iv.merge_sorted(starts, starts + wait[order]), None, lo, hi)
    return _PerStep(rank=t.rank[step_row], step_ns=hi - lo, comp=t.comp, comm=t.comm, overlap=t.overlap,
                    loader=t.dataloader, sync=sync.astype(_I64), transfer=(coll - sync).astype(_I64))


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
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]) if ranks.size else np.zeros(0, _I64)
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


def _late_starts(t: RankTable, calls: _Calls, transfer: np.ndarray, wait: np.ndarray, matched: np.ndarray,
                 window: int | None) -> list[LateStart]:
    out: list[LateStart] = []
    if not calls.key.size:
        return out
    n = int(calls.key.max()) + 1
    max_wait = np.zeros(n, _I64)
    np.maximum.at(max_wait, calls.key, wait)
    sum_wait = np.bincount(calls.key, weights=wait, minlength=n)
    # the call of each key whose duration is the shortest (the first such row): the rank that arrived last
    shortest = np.flatnonzero(calls.dur == transfer)
    keys, first = np.unique(calls.key[shortest], return_index=True)
    for k, i in zip(keys.tolist(), shortest[first].tolist()):
        m = int(matched[i])
        if m < 2 or max_wait[k] <= 0:
            continue
        out.append(LateStart(window=window, step=int(calls.step[i]) if calls.step[i] >= 0 else None,
                             group=t.groups[calls.group[i]], seq=int(calls.seq[i]) if calls.seq[i] >= 0 else None,
                             name=t.names[calls.name[i]], ranks=m, late_rank=int(t.rank[calls.row[i]]),
                             max_wait_ns=int(max_wait[k]), mean_wait_ns=float(sum_wait[k]) / (m - 1)))
    return out


def _window_rows(t: RankTable) -> list[np.ndarray]:
    """Row indices of each window (in window order), one row per rank (the first given), in rank order."""
    if not len(t):
        return []
    none = (t.window < 0).astype(_I64)
    window, first = np.maximum(t.window, 0), np.maximum(t.first_step, 0)
    order = np.lexsort((first, window, none))
    key = np.stack([none[order], window[order], first[order]], axis=1)
    cuts = np.flatnonzero(np.any(np.diff(key, axis=0) != 0, axis=1)) + 1
    out = []
    for rows in np.split(order, cuts):
        _, firsts = np.unique(t.rank[rows], return_index=True)  # sorted ranks, their first row (stable order)
        out.append(rows[firsts])
    return out


def _score_window(t: RankTable, threshold: float, best: Mapping[int, float], world_size: int | None) -> _Window:
    calls = _calls(t)
    transfer, matched = _transfer(calls)
    wait = np.where(matched >= 2, calls.dur - transfer, 0)
    per = _per_step(t, calls, wait)
    _, _, _, median_own = _group_means(per)
    individual = {}
    for rank, current in zip(t.rank.tolist(), median_own.tolist()):
        prior = best.get(rank)
        individual[rank] = (min(prior, current) / current) if prior is not None and current > 0 else None
    host_names = [t.hosts[h] if h >= 0 else None for h in range(-1, len(t.hosts))]
    hosts = dict(zip(t.rank.tolist(), (host_names[h + 1] for h in t.host.tolist())))
    window = int(t.window[0]) if len(t) and t.window[0] >= 0 else None
    stats = _ranks(per, hosts, window, individual, threshold)
    late = _late_starts(t, calls, transfer, wait, matched, window)
    waits: dict[int, tuple[int, int]] = {}
    for ls in late:
        c, w = waits.get(ls.late_rank, (0, 0))
        waits[ls.late_rank] = (c + 1, w + ls.max_wait_ns)
    ops = _comm_ops(t, calls, np.where(matched >= 2, transfer, calls.dur))
    size = world_size or max(int(t.world_size.max(initial=0)), len(t))
    missing = sorted(set(range(size)) - set(t.rank.tolist()))
    n_matched = int((np.bincount(calls.key) >= 2).sum()) if calls.key.size else 0
    waited = [WaitedFor(rank=k, collectives=c, wait_ns=w) for k, (c, w) in sorted(waits.items())]
    message = explain(stats, waited, n_matched, threshold)
    first_step = int(t.first_step[0]) if len(t) and t.first_step[0] >= 0 else None
    return _Window(
        stats=DistributedWindow(window=window, first_step=first_step, ranks=stats,
                                stragglers=[s.rank for s in stats if s.straggler], missing_ranks=missing,
                                message=message),
        per=per, hosts=hosts, late=late, ops=ops, waits=waits, matched=n_matched,
    )


def _comm_ops(t: RankTable, calls: _Calls, transfer: np.ndarray) -> list[CommOpStats]:
    """One row per (rank, collective name): calls, bytes (of the calls whose size is known), times."""
    if not calls.row.size:
        return []
    width = max(len(t.names), 1)
    dense = calls.row * width + calls.name  # (row, name) pairs; rows are the window's ranks in order
    used = np.bincount(dense, minlength=len(t) * width)
    keys = np.flatnonzero(used)
    slot = np.zeros(used.size, _I64)
    slot[keys] = np.arange(keys.size)
    inverse = slot[dense]

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(inverse, weights=values.astype(np.float64), minlength=keys.size)

    known = calls.bytes >= 0
    n_calls, n_known = total(np.ones(calls.row.size)).tolist(), total(known).tolist()
    size, latency, moved = (total(np.where(known, calls.bytes, 0)).tolist(), total(calls.dur).tolist(),
                            total(transfer).tolist())
    hidden, unknown = total(np.maximum(calls.hidden, 0)).tolist(), total(calls.hidden < 0).tolist()
    kinds = [kind(n) for n in t.names]
    ranks = t.rank.tolist()
    out = []
    for i, k in enumerate(keys.tolist()):
        n, kn, name_id = int(n_calls[i]), int(n_known[i]), k % width
        h = None if unknown[i] else int(hidden[i])
        out.append(CommOpStats(rank=ranks[k // width], name=t.names[name_id], calls=n,
                               total_bytes=int(size[i]) if kn else None, mean_bytes=size[i] / kn if kn else None,
                               total_ns=int(latency[i]), mean_ns=latency[i] / n, transfer_ns=int(moved[i]),
                               mean_transfer_ns=moved[i] / n, kind=kinds[name_id], hidden_ns=h,
                               exposed_ns=None if h is None else int(latency[i]) - h))
    return out


def _merge_ops(ops: Sequence[CommOpStats]) -> list[CommOpStats]:
    """Rows of several windows summed per (rank, name), means recomputed."""
    acc: dict[tuple[int, str], list] = {}
    for o in ops:
        a = acc.setdefault((o.rank, o.name), [0, 0, 0, 0, 0, 0, o.kind])
        known = 0 if o.total_bytes is None else round(o.total_bytes / o.mean_bytes) if o.mean_bytes else o.calls
        a[0] += o.calls
        a[1] += known
        a[2] += o.total_bytes or 0
        a[3] += o.total_ns
        a[4] += o.transfer_ns
        a[5] = None if a[5] is None or o.hidden_ns is None else a[5] + o.hidden_ns
    return [CommOpStats(rank=rank, name=name, calls=n, total_bytes=b if kn else None, mean_bytes=b / kn if kn else None,
                        total_ns=t, mean_ns=t / n, transfer_ns=x, mean_transfer_ns=x / n, kind=k, hidden_ns=h,
                        exposed_ns=None if h is None else t - h)
            for (rank, name), (n, kn, b, t, x, h, k) in acc.items()]


def _sorted_ops(ops: Sequence[CommOpStats]) -> list[CommOpStats]:
    return sorted(ops, key=lambda o: (o.rank, -o.total_ns, o.name))


def score(summaries: Sequence[RankWindow], threshold: float = THRESHOLD, *, world_size: int | None = None,
          best_median_ms: Mapping[int, float] | None = None, keep_summaries: bool = False) -> DistributedStats:
    """Score a table of per-rank windows (any number of windows and ranks; rows of one window share its index).

    ``best_median_ms`` are earlier windows' best median own times per rank (for the individual scores of a
    live run); ``keep_summaries`` keeps the input rows in the result.
    """
    stats = score_table(RankTable.from_windows(summaries), threshold, world_size=world_size,
                        best_median_ms=best_median_ms)
    return msgspec.structs.replace(stats, summaries=list(summaries)) if keep_summaries else stats


def score_table(table: RankTable, threshold: float = THRESHOLD, *, world_size: int | None = None,
                best_median_ms: Mapping[int, float] | None = None) -> DistributedStats:
    """:func:`score` of a columnar table (what the live gather merges its ranks' rows into)."""
    best = dict(best_median_ms or {})
    windows: list[_Window] = []
    for rows in _window_rows(table):
        whole = rows.size == len(table) and bool((rows == np.arange(rows.size)).all())
        w = _score_window(table if whole else table.take(rows), threshold, best, world_size)
        windows.append(w)
        for r in w.stats.ranks:
            if r.steps and r.median_own_ms > 0:
                best[r.rank] = min(best.get(r.rank, r.median_own_ms), r.median_own_ms)
    per = _PerStep(*(np.concatenate([getattr(w.per, f) for w in windows]) if len(windows) > 1 else
                     getattr(windows[0].per, f) if windows else np.zeros(0, _I64) for f in _PerStep.__dataclass_fields__))
    if len(windows) == 1:  # the run's numbers are the window's
        ranks = [msgspec.structs.replace(r, window=None) for r in windows[0].stats.ranks]
    else:
        hosts = {k: v for w in windows for k, v in w.hosts.items()}
        last_individual = {r.rank: r.individual_score for w in windows for r in w.stats.ranks}
        ranks = _ranks(per, hosts, None, last_individual, threshold)
    waits: dict[int, tuple[int, int]] = {}
    for w in windows:
        for k, (c, t) in w.waits.items():
            c0, t0 = waits.get(k, (0, 0))
            waits[k] = (c0 + c, t0 + t)
    waited = [WaitedFor(rank=k, collectives=c, wait_ns=t) for k, (c, t) in sorted(waits.items())]
    n_matched = sum(w.matched for w in windows)
    size = world_size or max(int(table.world_size.max(initial=0)), len(ranks))
    ops = [o for w in windows for o in w.ops]
    return DistributedStats(
        threshold=threshold, world_size=size or None, ranks=ranks, stragglers=[r.rank for r in ranks if r.straggler],
        message=explain(ranks, waited, n_matched, threshold),
        comm_ops=_sorted_ops(ops if len(windows) == 1 else _merge_ops(ops)),
        late_starts=[ls for w in windows for ls in w.late], waited_for=waited, windows=[w.stats for w in windows],
        missing_ranks=sorted({m for w in windows for m in w.stats.missing_ranks}),
    )
