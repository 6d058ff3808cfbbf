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


class _MaxTree:
    """A segment tree of ``values``' maxima, answering "the last position at or before ``r`` whose value is at least
    ``x``" for many queries at once in O(log n) numpy passes each (no pass per tree level of the nesting)."""

    def __init__(self, values: np.ndarray) -> None:
        self.size = 1 << max(values.size - 1, 0).bit_length()
        tree = np.full(2 * self.size, np.iinfo(np.int64).min, np.int64)
        tree[self.size : self.size + values.size] = values
        lo = self.size
        while lo > 1:
            tree[lo // 2 : lo] = np.maximum(tree[lo : 2 * lo : 2], tree[lo + 1 : 2 * lo : 2])
            lo //= 2
        self.tree = tree

    def last_at_least(self, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        """For each query, the largest position ``j <= r`` with ``values[j] >= x``, or -1."""
        tree, size = self.tree, self.size
        out = np.full(r.size, -1, np.int64)
        q = np.flatnonzero(r >= 0)
        node = r[q] + size
        hit = tree[node] >= x[q]
        out[q[hit]] = r[q[hit]]
        q, node = q[~hit], node[~hit]
        found_q, found_node = [q[:0]], [node[:0]]
        while q.size:  # climb: the left sibling of a right child covers the positions just before
            up = node > 1
            q, node = q[up], node[up]
            left = (node & 1).astype(bool) & (tree[node - 1] >= x[q])
            found_q.append(q[left])
            found_node.append(node[left] - 1)
            q, node = q[~left], node[~left] // 2
        q, node = np.concatenate(found_q), np.concatenate(found_node)
        while (inner := node < size).any():  # descend: the rightmost child whose maximum is high enough
            right = 2 * node[inner] + 1
            node[inner] = np.where(tree[right] >= x[q[inner]], right, right - 1)
        out[q] = node - size
        return out


class Nesting:
    """Per-thread nesting of intervals ``[starts, ends)``: parents and innermost enclosing interval of points.

    In ``order`` (by thread, start, longer first) the intervals form a forest in preorder, as a stack walk builds
    it: an interval's parent is the innermost earlier one on its thread still open at the child's end (ending at or
    after ``max(end, start + 1)``). Ends never decrease from a child to its parent, so the parent is simply the last
    earlier interval on the thread ending that late, and every walk up or down the forest is a query on a segment
    tree of the ends or a pointer-doubling pass: O(n log n) whatever the depth (100,000 nested operators are one
    chain), where a numpy pass per level was quadratic."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> None:
        self.starts = np.asarray(starts, np.int64)
        self.ends = np.asarray(ends, np.int64)
        self.threads = np.asarray(threads, np.int64)
        self.order = np.lexsort((-(self.ends - self.starts), self.starts, self.threads))
        n = self.starts.size
        th = self.threads[self.order]
        new_thread = np.ones(n, bool)
        new_thread[1:] = th[1:] != th[:-1]
        #: per position in ``order``: the first position of its thread
        self._first = np.maximum.accumulate(np.where(new_thread, np.arange(n), 0)) if n else np.zeros(0, np.int64)
        self._tree = _MaxTree(self.ends[self.order])
        self._up = self._parents()
        self.parent = np.full(n, -1, np.int64)
        has = self._up >= 0
        self.parent[self.order[has]] = self.order[self._up[has]]

    def _last_open(self, last: np.ndarray, x: np.ndarray, first: np.ndarray) -> np.ndarray:
        """Per query: the last position in ``first..last`` (a thread's) of an interval ending at ``x`` or later,
        else -1."""
        found = self._tree.last_at_least(last, x)
        return np.where(found >= first, found, -1)

    def _parents(self) -> np.ndarray:
        """The parent of each position in ``order`` (a position, -1 for none)."""
        n = self.starts.size
        s, e = self.starts[self.order], self.ends[self.order]
        return self._last_open(np.arange(n, dtype=np.int64) - 1, np.maximum(e, s + 1), self._first)

    def self_lengths(self) -> np.ndarray:
        """Each interval's length minus its direct children's lengths."""
        lengths = self.ends - self.starts
        out = lengths.copy()
        has = self.parent >= 0
        np.subtract.at(out, self.parent[has], lengths[has])
        return out

    def depth(self) -> np.ndarray:
        """Each interval's number of ancestors."""
        out = np.empty(self.starts.size, np.int64)
        out[self.order] = _depths(self._up)
        return out

    def subtree_sums(self, values: np.ndarray) -> np.ndarray:
        """Each interval's value plus the values of all its descendants (exact for integer values below 2**53,
        which prefix sums over the preorder keep exact)."""
        v = np.asarray(values, np.float64)[self.order]
        if not (np.isfinite(v).all() and (v == np.rint(v)).all() and np.abs(v).sum() < 2.0**53):
            return self._subtree_sums_by_level(v)
        before = np.concatenate([[0.0], np.cumsum(v)])
        out = np.empty(v.size)
        out[self.order] = before[self._last_descendant() + 1] - before[:-1]
        return out

    def _subtree_sums_by_level(self, v: np.ndarray) -> np.ndarray:
        """:meth:`subtree_sums` adding each level into the one above, deepest first (any float values)."""
        depth = _depths(self._up)
        by_depth = np.argsort(-depth, kind="stable")
        bounds = np.flatnonzero(np.diff(depth[by_depth])) + 1
        for rows in np.split(by_depth, bounds):
            rows = rows[self._up[rows] >= 0]
            np.add.at(v, self._up[rows], v[rows])
        out = np.empty(v.size)
        out[self.order] = v
        return out

    def _last_descendant(self) -> np.ndarray:
        """Per position: the position of its last descendant (itself for a leaf); a subtree is a run of positions."""
        n = self._up.size
        last = np.arange(n, dtype=np.int64)
        has = np.flatnonzero(self._up >= 0)
        np.maximum.at(last, self._up[has], has)  # each one's last child
        live = np.flatnonzero(last != np.arange(n))
        while live.size:  # pointer doubling along last children
            last[live] = last[last[live]]
            live = live[last[last[live]] != last[live]]
        return last

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
        # the innermost interval started by t is the last started on the thread that ends after t
        pos = np.where(ok, pos, -1)
        found = self._last_open(pos, times + 1, self._first[np.maximum(pos, 0)])
        out[found >= 0] = self.order[found[found >= 0]]
        return out


def _depths(up: np.ndarray) -> np.ndarray:
    """Each node's distance to its root, from parent pointers (-1: a root), by pointer doubling."""
    depth = (up >= 0).astype(np.int64)
    nxt = up.copy()
    live = np.flatnonzero(nxt >= 0)
    while live.size:
        depth[live] += depth[nxt[live]]
        nxt[live] = nxt[nxt[live]]
        live = live[nxt[live] >= 0]
    return depth
