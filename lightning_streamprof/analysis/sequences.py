"""Frequent kernel sequences under an operator: fusion candidates (HTA's ``get_frequent_cuda_kernel_sequences``).

Each outermost CPU operator (with ``operator``: each outermost one whose name contains it) that launched at least
``min_length`` device events gives one pattern: its name and the names of the device events launched under it
(launch call inside it or inside one of its children, on its thread), in order of their start on the device.
Identical patterns are counted together with their summed device time and the operators' summed duration; the most
frequent come first. An operator instance that repeats a run of small kernels step after step is what a fused or
compiled kernel (``torch.compile``, a fused optimizer, a fused norm) replaces.

HTA starts from the candidates at the smallest call-stack depth among all candidates of the trace, so a match
nested deeper in another branch is left out; here every outermost match counts. HTA's call graph also leaves out
device events on stream 0 (every event of a ROCm trace), which count here. Patterns are compared by their exact
sequence (two 64-bit polynomial hashes of the name codes and the length), and only the ``limit`` most frequent are
kept.
"""

from __future__ import annotations

import numpy as np

from lightning_streamprof.analysis._links import Nesting
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.results.hta import KernelSequence, KernelSequences, sort_sequences

_B1 = np.uint64(0x9E3779B97F4A7C15)
_B2 = np.uint64(0xC2B2AE3D27D4EB4F)
#: patterns kept per trace
LIMIT = 50


def sequence_groups(instance: np.ndarray, codes: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, ...]:
    """Group instances by (``key``, their sequence of ``codes``).

    ``instance`` (non-decreasing) gives each element's instance, elements in sequence order within it; ``key`` is
    a value per element, the same within an instance (e.g. the operator's name). Returns per instance its first
    element and its group, and per group a representative instance (its first).
    """
    n = codes.size
    if n == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    heads = np.flatnonzero(np.r_[True, instance[1:] != instance[:-1]])
    key = key[heads]
    lengths = np.diff(np.r_[heads, n])
    pos = np.arange(n, dtype=np.int64) - np.repeat(heads, lengths)
    top = int(pos.max()) + 1
    with np.errstate(over="ignore"):
        p1 = np.cumprod(np.r_[np.uint64(1), np.full(top - 1, _B1, np.uint64)], dtype=np.uint64)
        p2 = np.cumprod(np.r_[np.uint64(1), np.full(top - 1, _B2, np.uint64)], dtype=np.uint64)
        c = codes.astype(np.uint64) + np.uint64(1)
        h1 = np.add.reduceat(c * p1[pos], heads, dtype=np.uint64)
        h2 = np.add.reduceat(c * p2[pos], heads, dtype=np.uint64)
    order = np.lexsort((h2, h1, lengths, key))
    new = np.ones(order.size, bool)
    new[1:] = ((key[order][1:] != key[order][:-1]) | (lengths[order][1:] != lengths[order][:-1])
               | (h1[order][1:] != h1[order][:-1]) | (h2[order][1:] != h2[order][:-1]))
    groups = np.empty(order.size, np.int64)
    groups[order] = np.cumsum(new) - 1
    first = np.full(int(groups.max()) + 1, order.size, np.int64)
    np.minimum.at(first, groups, np.arange(order.size))
    return heads, groups, first


def outermost_matching(nesting: Nesting, match: np.ndarray) -> np.ndarray:
    """For each interval, its outermost ancestor-or-self that matches (index), or -1 (pointer doubling: each pass
    doubles the stretch of ancestors looked at, so any depth takes log passes)."""
    best = np.where(match, np.arange(match.size, dtype=np.int64), -1)
    up = nesting.parent.copy()
    while (live := np.flatnonzero(up >= 0)).size:
        above = up[live]
        higher = best[above]
        best[live] = np.where(higher >= 0, higher, best[live])
        up[live] = up[above]
    return best


def kernel_sequences(ctx: TraceContext, operator: str | None = None, *, min_length: int = 3,
                     limit: int = LIMIT) -> KernelSequences:
    """The kernel sequences under the outermost (matching) operators, most frequent first."""
    t = ctx.table
    empty = KernelSequences(min_length=min_length, operator=operator)
    ops = ctx.ops
    launch = ctx.device_launch
    linked = np.flatnonzero(launch >= 0)
    if ops.size == 0 or linked.size == 0:
        return empty
    nesting = ctx.op_nesting
    match = ctx.mask(ops, lambda name: operator in name) if operator else np.ones(ops.size, bool)
    top = outermost_matching(nesting, match)
    r = launch[linked]
    inner = nesting.enclosing(t.ts[r], ctx.thread_keys(r))
    root = np.where(inner >= 0, top[np.maximum(inner, 0)], -1)
    keep = root >= 0
    dev, root = ctx.device_rows[linked[keep]], root[keep]
    order = np.lexsort((t.ts[dev], root))
    dev, root = dev[order], root[order]
    counts = np.bincount(root, minlength=ops.size)
    long_enough = counts[root] >= min_length
    dev, root = dev[long_enough], root[long_enough]
    if dev.size == 0:
        return empty
    heads, groups, first = sequence_groups(root, t.name[dev], t.name[ops[root]])
    inst_root = root[heads]
    lengths = np.diff(np.r_[heads, dev.size])
    n = first.size
    count = np.bincount(groups, minlength=n)
    kernel_ns = np.bincount(np.repeat(groups, lengths), weights=t.dur[dev], minlength=n)
    op_ns = np.bincount(groups, weights=t.dur[ops[inst_root]], minlength=n)
    best = np.lexsort((-kernel_ns, -count))[:limit]
    rows = []
    for g in best.tolist():
        i = int(first[g])
        members = dev[heads[i]:heads[i] + lengths[i]]
        rows.append(KernelSequence(operator=t.names[t.name[ops[inst_root[i]]]],
                                   kernels=[t.names[c] for c in t.name[members].tolist()],
                                   count=int(count[g]), kernel_ns=int(kernel_ns[g]), op_ns=int(op_ns[g])))
    return KernelSequences(min_length=min_length, operator=operator, sequences=sort_sequences(rows),
                           truncated=n > limit)
