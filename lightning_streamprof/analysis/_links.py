"""Shared index helpers: id look-ups, grouping and per-thread interval nesting."""

from __future__ import annotations

import numpy as np

from lightning_streamprof.trace.table import EventTable


def lookup(keys: np.ndarray, rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """For each query, the row (from ``rows``) whose key equals it (first one), or -1; keys < 0 never match."""
    out = np.full(queries.shape, -1, np.int64)
    valid = keys >= 0
    keys, rows = keys[valid], rows[valid]
    if keys.size == 0 or queries.size == 0:
        return out
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], rows[order]
    pos = np.searchsorted(keys, queries)
    ok = (pos < keys.size) & (queries >= 0)
    hit = np.zeros(queries.shape, bool)
    hit[ok] = keys[pos[ok]] == queries[ok]
    out[hit] = rows[pos[hit]]
    return out


def group(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ``keys`` and each key's index into them (a sort-based ``np.unique``)."""
    keys = np.asarray(keys)
    if keys.size == 0:
        return keys.copy(), np.zeros(0, np.int64)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    new = np.empty(keys.size, bool)
    new[0] = True
    new[1:] = ordered[1:] != ordered[:-1]
    inverse = np.empty(keys.size, np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def thread_keys(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """One key per (pid, tid) of each row."""
    return table.pid[rows] * (1 << 32) + (table.tid[rows] & 0xFFFFFFFF)


class Nesting:
    """Per-thread nesting of intervals ``[starts, ends)``: parents and innermost enclosing interval of points."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> None:
        self.starts = np.asarray(starts, np.int64)
        self.ends = np.asarray(ends, np.int64)
        self.threads = np.asarray(threads, np.int64)
        self.order = np.lexsort((-(self.ends - self.starts), self.starts, self.threads))
        self.parent = self._parents()

    def _parents(self) -> np.ndarray:
        """Innermost earlier interval on the same thread that contains each one (pointer jumping)."""
        n = self.starts.size
        parent = np.full(n, -1, np.int64)
        if n == 0:
            return parent
        o = self.order
        s, e, th = self.starts[o], self.ends[o], self.threads[o]
        reach = np.maximum(e, s + 1)
        p = np.arange(n, dtype=np.int64) - 1
        p[0] = -1
        p[1:][th[1:] != th[:-1]] = -1
        while True:
            live = np.flatnonzero(p >= 0)
            bad = live[e[p[live]] < reach[live]]
            if bad.size == 0:
                break
            p[bad] = p[p[bad]]
        has = p >= 0
        parent[o[has]] = o[p[has]]
        return parent

    def self_lengths(self) -> np.ndarray:
        """Each interval's length minus its direct children's lengths."""
        lengths = self.ends - self.starts
        out = lengths.copy()
        has = self.parent >= 0
        np.subtract.at(out, self.parent[has], lengths[has])
        return out

    def subtree_sums(self, values: np.ndarray) -> np.ndarray:
        """Each interval's value plus the values of all its descendants."""
        out = np.asarray(values, np.float64).copy()
        depth = self.depth()
        for d in range(int(depth.max(initial=0)), 0, -1):
            rows = np.flatnonzero(depth == d)
            np.add.at(out, self.parent[rows], out[rows])
        return out

    def depth(self) -> np.ndarray:
        depth = np.zeros(self.starts.size, np.int64)
        cur = self.parent.copy()
        while True:
            live = cur >= 0
            if not live.any():
                return depth
            depth[live] += 1
            cur[live] = self.parent[cur[live]]

    def enclosing(self, times: np.ndarray, threads: np.ndarray) -> np.ndarray:
        """Index of the innermost interval on the same thread with ``start <= t < end``, or -1."""
        times = np.asarray(times, np.int64)
        out = np.full(times.size, -1, np.int64)
        if self.starts.size == 0 or times.size == 0:
            return out
        codes, inverse = group(np.concatenate([self.threads, np.asarray(threads, np.int64)]))
        base = min(int(self.starts.min()), int(times.min()))
        span = max(int(self.starts.max()), int(times.max())) - base + 1
        shift = int(span).bit_length()
        code_int = inverse[: self.starts.size].astype(np.int64)
        code_pts = inverse[self.starts.size :].astype(np.int64)
        keys = (code_int[self.order] << shift) + (self.starts[self.order] - base)
        queries = (code_pts << shift) + (times - base)
        pos = np.searchsorted(keys, queries, side="right") - 1
        ok = pos >= 0
        ok[ok] = code_int[self.order[pos[ok]]] == code_pts[ok]
        cand = np.full(times.size, -1, np.int64)
        cand[ok] = self.order[pos[ok]]
        while True:
            live = cand >= 0
            bad = np.zeros(times.size, bool)
            bad[live] = self.ends[cand[live]] <= times[live]
            if not bad.any():
                break
            cand[bad] = self.parent[cand[bad]]
        out[:] = cand
        return out
