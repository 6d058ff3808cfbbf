import gzip
import json
import subprocess
import sys
import time

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


# ------------------------------------------------------------------------------------------------ against a reference
def _reference(starts, ends, threads, times, point_threads, values):
    """Parents, depths, subtree sums and enclosing intervals by the definitions, one interval at a time: in order
    (thread, start, longer first), the parent is the innermost open interval (a stack) still open at the
    interval's end, ``max(end, start + 1)``; a point's interval is the innermost open one at ``t + 1``."""
    order = np.lexsort((-(ends - starts), starts, threads)).tolist()
    parent = [-1] * starts.size
    stack, last = [], None
    for i in order:
        if threads[i] != last:
            stack, last = [], threads[i]
        while stack and ends[stack[-1]] < max(ends[i], starts[i] + 1):
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    depth, sums = [0] * starts.size, [float(v) for v in values]
    for i in range(starts.size):
        up = parent[i]
        while up >= 0:
            depth[i] += 1
            sums[up] += float(values[i])
            up = parent[up]
    found = []
    for t, thread in zip(times.tolist(), point_threads.tolist()):
        started = [i for i in order if threads[i] == thread and starts[i] <= t]
        inner = started[-1] if started else -1
        while inner >= 0 and ends[inner] <= t:
            inner = parent[inner]
        found.append(inner)
    return parent, depth, sums, found


def _shapes(rng, n):
    """Random intervals on a few threads: nested, overlapping, empty, repeated, and long chains of nesting."""
    kind = rng.integers(0, 4)
    if kind == 0:  # anything
        starts = rng.integers(0, 100, n)
        ends = starts + rng.integers(0, 60, n) * (rng.random(n) < 0.9)
    elif kind == 1:  # chains: each inside the previous, then a chain after it, and siblings after both
        depth = max(n // 3, 1)
        starts = np.concatenate([np.arange(depth), 1000 + np.arange(depth), 3000 + 3 * np.arange(n - 2 * depth)])
        ends = np.concatenate([2 * depth - np.arange(depth), 1000 + 2 * depth - np.arange(depth),
                               3001 + 3 * np.arange(n - 2 * depth)])
    else:  # properly nested, from a recursive split
        rows = []
        _nested(rng, 0, 300, 0, rows)
        rows = (rows * (1 + n // max(len(rows), 1)))[:n] if rows else [(0, 1)] * n
        starts, ends = np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64)
    threads = rng.integers(0, 1 + kind, n)
    perm = rng.permutation(n)
    return starts[perm], ends[perm], threads[perm]


@pytest.mark.parametrize("seed", range(40))
def test_fast_walks_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    starts, ends, threads = _shapes(rng, n)
    times = rng.integers(-2, int(ends.max()) + 3, 200)
    point_threads = rng.integers(0, 4, 200)
    values = rng.integers(-(10**6), 10**6, n)
    parent, depth, sums, found = _reference(starts, ends, threads, times, point_threads, values)
    nest = Nesting(starts, ends, threads)
    assert nest.parent.tolist() == parent
    assert nest.depth().tolist() == depth
    assert nest.subtree_sums(values).tolist() == sums
    fractions = rng.random(n)  # not integers: summed level by level
    assert np.allclose(nest.subtree_sums(fractions), _reference(starts, ends, threads, times[:0], point_threads[:0],
                                                               fractions)[2], rtol=1e-12, atol=1e-9)
    assert nest.enclosing(times, point_threads).tolist() == found
    lengths = ends - starts
    own = lengths.copy()
    for i, p in enumerate(parent):
        if p >= 0:
            own[p] -= lengths[i]
    assert nest.self_lengths().tolist() == own.tolist()


def test_a_deep_chain_of_nesting():
    """5,000 intervals each inside the previous, then 5,000 more after them: depth 4,999, one subtree each."""
    n = 5000
    starts = np.concatenate([np.arange(n), 10 * n + np.arange(n)])
    ends = np.concatenate([2 * n - np.arange(n), 12 * n - np.arange(n)])
    nest = Nesting(starts, ends, np.zeros(2 * n, np.int64))
    assert nest.parent.tolist() == [-1] + list(range(n - 1)) + [-1] + list(range(n, 2 * n - 1))
    assert nest.depth().tolist() == 2 * list(range(n))
    assert nest.subtree_sums(np.ones(2 * n)).tolist() == 2 * list(range(n, 0, -1))
    assert nest.enclosing(np.array([n - 1, n, 2 * n - 1, 10 * n + 3]), np.zeros(4, np.int64)).tolist() == [
        n - 1, n - 1, 0, n + 3]


def test_hundred_thousand_nested_operators_analyse_in_seconds(tmp_path):
    """100,000 CPU operators on one thread, each inside the previous, each allocating 512 bytes, every 100th
    launching a kernel: the nesting's walks were one numpy pass per level (5k 0.8 s, 40k 19.5 s, quadratic)."""
    n = 100_000
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0,
               "dur": 2 * n + 2}]
    for i in range(n):
        name = "aten::outer" if i == 0 else f"aten::op{i % 7}"
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": i, "dur": 2 * (n - i) + 1,
                       "args": {"External id": i + 1}})
        events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": i,
                       "args": {"Total Reserved": 1 << 40, "Total Allocated": 512 * (i + 1), "Bytes": 512, "Addr": i,
                                "Device Type": 1, "Device Id": 0}})
        if i % 100 == 0:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": i,
                           "dur": 0, "args": {"External id": i + 1, "correlation": i + 1}})
            events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": i, "dur": 1,
                           "args": {"External id": i + 1, "correlation": i + 1, "device": 0, "stream": 7}})
    path = tmp_path / "nested.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", "import sys; from lightning_streamprof.cli import main; "
                          "sys.exit(main(sys.argv[1:]))", "analyze", "--json", str(path)],
                         capture_output=True, text=True, timeout=15)
    assert out.returncode == 0, out.stderr[-2000:]
    assert time.perf_counter() - start < 15  # about 1 s on a 2-core machine
    result = json.loads(out.stdout)
    ops = {o["name"]: o for o in result["operators"]}
    assert sum(o["calls"] for o in ops.values()) == n
    assert ops["aten::outer"]["device_total_ns"] == 1000 * n // 100 and ops["aten::outer"]["device_self_ns"] == 1000
    memory = {m["name"]: m for m in result["memory"]["operators"]}["aten::outer"]
    assert (memory["self_allocations"], memory["allocations"]) == (1, n)
    assert (memory["self_allocation_bytes"], memory["allocation_bytes"]) == (512, 512 * n)
