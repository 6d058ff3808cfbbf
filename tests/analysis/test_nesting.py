import numpy as np
import pytest

from lightning_streamprof.analysis._links import Nesting, group, lookup


def _parents_by_stack(starts, ends, threads):
    order = np.lexsort((-(ends - starts), starts, threads))
    parent = np.full(starts.size, -1, np.int64)
    stack, last = [], None
    for i in order.tolist():
        if threads[i] != last:
            stack, last = [], threads[i]
        while stack and ends[stack[-1]] <= starts[i]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def _nested(rng, lo, hi, depth, out):
    t = lo
    while t < hi and depth < 6:
        t += int(rng.integers(0, 3)) if rng.random() < 0.3 else 0
        if t >= hi:
            break
        length = int(rng.integers(0, max(1, hi - t)))
        out.append((t, t + length))
        if length:
            _nested(rng, t, t + length, depth + 1, out)
        t += length or int(rng.integers(0, 2))


@pytest.mark.parametrize("seed", range(20))
def test_parents_match_a_stack_walk(seed):
    rng = np.random.default_rng(seed)
    rows = []
    for thread in range(3):
        out = []
        _nested(rng, 0, 300, 0, out)
        rows += [(s, e, thread) for s, e in out]
    a = np.array(rows)[rng.permutation(len(rows))]
    nest = Nesting(a[:, 0], a[:, 1], a[:, 2])
    assert (nest.parent == _parents_by_stack(a[:, 0], a[:, 1], a[:, 2])).all()


def test_self_lengths_subtree_sums_and_enclosing():
    # thread 0: A [0,100) > B [10,50) > C [20,30); D [60,70) in A; thread 1: E [0,100)
    starts = np.array([0, 10, 20, 60, 0])
    ends = np.array([100, 50, 30, 70, 100])
    threads = np.array([0, 0, 0, 0, 1])
    nest = Nesting(starts, ends, threads)
    assert nest.parent.tolist() == [-1, 0, 1, 0, -1]
    assert nest.self_lengths().tolist() == [100 - 40 - 10, 40 - 10, 10, 10, 100]
    assert nest.subtree_sums(np.array([1, 2, 4, 8, 16])).tolist() == [15, 6, 4, 8, 16]
    found = nest.enclosing(np.array([25, 30, 55, 65, 100, 5, -1]), np.array([0, 0, 0, 0, 0, 1, 0]))
    assert found.tolist() == [2, 1, 0, 3, -1, 4, -1]
    assert nest.enclosing(np.array([5]), np.array([2])).tolist() == [-1]


def test_group_and_lookup():
    keys, inverse = group(np.array([5, 3, 5, 9, 3]))
    assert keys.tolist() == [3, 5, 9] and inverse.tolist() == [1, 0, 1, 2, 0]
    rows = np.array([10, 11, 12])
    assert lookup(np.array([7, -1, 3]), rows, np.array([3, 7, -1, 4])).tolist() == [12, 10, -1, -1]
