"""HTA's analyses on hand-built traces: every expected number is derived in the docstrings (times in µs).

The launch trace (:func:`launch_trace`), thread 1 of pid 100 unless said, device 0:

    step 1 [0, 200)
    call        at  dur   device event          stream
    K1          10   5    [20, 23)               7
    K2          12   4    [40, 60)               7     (inside the hook range [11, 13))
    K3          14   2    [120, 130)             7
    memcpy      16   3    [18, 19) 4,000 bytes   8     (cudaMemcpyAsync, pageable)
    K6          50   1    [55, 65)               9     (thread 2: an autograd-like thread with no range)
    K4         150  60    [215, 220)             7
    ranges: training_step [5, 100) > on_after_batch_transfer [11, 13); GPU-side copies on stream 7:
    training_step [20, 130), on_after_batch_transfer [40, 60)
"""

import pytest

from lightning_streamprof.analysis.user_ranges import annotation_times, hook_label
from lightning_streamprof.analysis.bandwidth import bandwidth
from lightning_streamprof.analysis.critical_path import NO_OPERATOR, critical_path
from lightning_streamprof.analysis.idle import idle_time
from lightning_streamprof.analysis.launches import launch_stats
from lightning_streamprof.analysis.queue import queue_lengths
from lightning_streamprof.analysis.sequences import kernel_sequences
from lightning_streamprof.results import TraceIdentity
from lightning_streamprof.results.hta_merge import (
    merge_annotation_times,
    merge_bandwidth,
    merge_critical_paths,
    merge_idle_time,
    merge_kernel_sequences,
    merge_launch_stats,
    merge_queue_lengths,
)
from tracebuilder import TraceBuilder

US = 1000
STEP = "[pl][profile][Strategy]SingleDeviceStrategy.training_step"
HOOK = "[pl][profile][LightningModule]Model.on_after_batch_transfer"


def _gpu_copy(b, name, ts, dur, stream=7):
    b.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": stream, "ts": ts,
                     "dur": dur, "args": {"External id": 0}})


def launch_trace():
    b = TraceBuilder()
    b.step(1, 0, 200)
    b.annotation(STEP, 5, 95)
    b.annotation(HOOK, 11, 2)
    b.launch("K1", 10, 20, 3, 900, rt_dur=5)
    b.launch("K2", 12, 40, 20, 900, rt_dur=4)
    b.launch("K3", 14, 120, 10, 900, rt_dur=2)
    b.launch("Memcpy HtoD (Pageable -> Device)", 16, 18, 1, 900, stream=8, cat="gpu_memcpy",
             rt_name="cudaMemcpyAsync", rt_dur=3, bytes=4000)
    b.launch("K6", 50, 55, 10, 900, stream=9, tid=2, rt_dur=1)
    b.launch("K4", 150, 215, 5, 900, rt_dur=60)
    _gpu_copy(b, STEP, 20, 110)
    _gpu_copy(b, HOOK, 40, 20)
    return b


def test_idle_time():
    """Stream 7: K2's gap 40 - 23 = 17 follows a launch at 12 < 23 and is under 30: kernel wait; K3's gap
    120 - 60 = 60, launched at 14 < 60: other; K4's gap 215 - 130 = 85, launched at 150 > 130: host wait. Busy
    3 + 20 + 10 + 5 = 38, span 220 - 20 = 200. Streams 8 and 9 have one event, no gap."""
    idle = idle_time(launch_trace().context(), TraceIdentity(path="x", rank=3))
    by = {s.stream: s for s in idle.streams}
    s7 = by[7]
    assert (s7.host_wait_ns, s7.kernel_wait_ns, s7.other_ns) == (85 * US, 17 * US, 60 * US)
    assert (s7.host_wait_gaps, s7.kernel_wait_gaps, s7.other_gaps) == (1, 1, 1)
    assert (s7.events, s7.busy_ns, s7.span_ns, s7.rank) == (4, 38 * US, 200 * US, 3)
    assert s7.ratio("host_wait") == pytest.approx(85 / 162)
    assert by[8].idle_ns == 0 and by[9].idle_ns == 0 and by[9].events == 1
    assert idle.kernel_wait_threshold_ns == 30 * US
    # a lower threshold makes K2's gap "other"
    s7 = {s.stream: s for s in idle_time(launch_trace().context(), kernel_wait_ns=10 * US).streams}[7]
    assert (s7.kernel_wait_ns, s7.other_ns) == (0, 77 * US)


def test_launch_stats():
    """cudaLaunchKernel: K1 cpu 5 gpu 3 delay 20 - 15 = 5 (short: 3 < 5 and 5 <= 50); K2 4, 20, 40 - 16 = 24; K3 2,
    10, 120 - 16 = 104 (a delay outlier, > 100); K6 1, 10, 55 - 51 = 4; K4 60 (a runtime outlier, > 50), 5,
    215 - 210 = 5. Sums: cpu 72, gpu 48, delay 142. cudaMemcpyAsync: cpu 3, gpu 1 (short), delay 18 - 19 < 0 -> 0."""
    stats = launch_stats(launch_trace().context())
    k = {r.name: r for r in stats.launches}["cudaLaunchKernel"]
    assert (k.launches, k.cpu_ns, k.gpu_ns, k.delay_ns) == (5, 72 * US, 48 * US, 142 * US)
    assert (k.max_cpu_ns, k.max_gpu_ns, k.max_delay_ns) == (60 * US, 20 * US, 104 * US)
    assert (k.short, k.short_gpu_ns, k.short_cpu_ns) == (1, 3 * US, 5 * US)
    assert (k.runtime_outliers, k.runtime_outlier_ns, k.delay_outliers, k.delay_outlier_ns) == (1, 60 * US, 1, 104 * US)
    m = {r.name: r for r in stats.launches}["cudaMemcpyAsync"]
    assert (m.launches, m.cpu_ns, m.gpu_ns, m.delay_ns, m.short) == (1, 3 * US, 1 * US, 0, 1)
    total = stats.total
    assert (total.launches, total.cpu_ns, total.max_cpu_ns) == (6, 75 * US, 60 * US)
    assert stats.operators == []  # no aten operator around the calls


def test_queue_lengths():
    """Stream 7: +1 at 10, 12, 14, 150; -1 at 20, 40, 120, 215: values 1, 2, 3, 2, 1, 0, 1, 0 (sum 10, squares 20),
    held 2, 2, 6, 20, 80, 30, 65 µs: integral 2 + 4 + 18 + 40 + 80 + 0 + 65 = 209, span 205; at 3 or more for 6 µs.
    Stream 9 (K6, from thread 2): 1 from 50 to 55."""
    q = {s.stream: s for s in queue_lengths(launch_trace().context(), max_queue_length=3).streams}
    s7 = q[7]
    assert (s7.launches, s7.points, s7.point_sum, s7.point_sq_sum) == (4, 8, 10, 20)
    assert (s7.max_length, s7.min_length, s7.length_ns, s7.span_ns, s7.blocked_ns) == (3, 0, 209 * US, 205 * US, 6 * US)
    assert s7.mean_length == pytest.approx(209 / 205) and s7.point_mean == pytest.approx(1.25)
    assert s7.point_std == pytest.approx(((20 - 100 / 8) / 7) ** 0.5)
    assert (q[9].span_ns, q[9].length_ns, q[9].max_length) == (5 * US, 5 * US, 1)
    assert queue_lengths(launch_trace().context()).streams[0].blocked_ns == 0  # 1,024 by default


def test_annotation_times():
    """training_step holds the launches of K1, K3, the memcpy and (from rangeless thread 2, at 50) K6 itself, and K2
    through the hook: kernels 3 + 20 + 10 + 10 = 43, device 44, self kernels 23, self device 24. The hook: K2, 20.
    K4 (launched at 150) is outside: 5. All device time 49 = 24 + 20 + 5. HTA's GPU-side copies: 110 and 20; the
    kernels starting inside them on stream 7: K1 and K3 (13) for training_step, K2 (20) for the hook."""
    times = annotation_times(launch_trace().context())
    by = {r.name: r for r in times.rows}
    step, hook = by[STEP], by[HOOK]
    assert (step.calls, step.host_ns, step.kernels, step.kernel_ns, step.device_ns) == (1, 95 * US, 4, 43 * US, 44 * US)
    assert (step.self_kernel_ns, step.self_device_ns) == (23 * US, 24 * US)
    assert (hook.calls, hook.host_ns, hook.kernel_ns, hook.self_kernel_ns) == (1, 2 * US, 20 * US, 20 * US)
    assert (times.device_ns, times.kernel_ns, times.outside_device_ns, times.unlinked_device_ns) == (49 * US, 48 * US,
                                                                                                    5 * US, 0)
    assert sum(r.self_device_ns for r in times.rows) + times.outside_device_ns == times.device_ns
    assert (step.gpu_span_calls, step.gpu_span_ns, hook.gpu_span_ns) == (1, 110 * US, 20 * US)
    assert (step.gpu_overlap_device_ns, hook.gpu_overlap_device_ns) == (13 * US, 20 * US)
    assert "ProfilerStep#1" not in by
    assert [r.name for r in times.rows][:2] == [STEP, HOOK]  # most device time first


def test_annotations_nested_same_name_count_once():
    """A range inside another of its name adds no host or device time a second time."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.annotation("outer", 0, 50)
    b.annotation("outer", 10, 20)
    b.launch("K", 12, 20, 5, 900)
    row = {r.name: r for r in annotation_times(b.context()).rows}["outer"]
    assert (row.calls, row.host_ns, row.device_ns, row.self_device_ns) == (2, 50 * US, 5 * US, 5 * US)


def test_hook_label():
    assert hook_label(STEP) == "training_step (Strategy)"
    assert hook_label("[pl][profile][LightningModule]Model.optimizer_step") == "optimizer_step (LightningModule)"
    assert hook_label("[pl][profile]run_training_batch") == "run_training_batch"
    assert hook_label("Optimizer.step#SGD.step") == "Optimizer.step#SGD.step"


def test_bandwidth():
    """Pageable HtoD: 4,000 B in 1 µs (4 GB/s) and 20,000 B in 2 µs (10 GB/s, at [300, 302)); pinned HtoD 30,000 B
    in 2 µs (15 GB/s, at [301, 303)). HTA's series for "Memcpy HtoD": 4, 0, 10, 25, 15, 0: four values above 0
    (sum 54, peak 25). A memcpy without a size (as on ROCm) has no bandwidth."""
    b = launch_trace()
    b.launch("Memcpy HtoD (Pageable -> Device)", 290, 300, 2, 900, stream=8, cat="gpu_memcpy",
             rt_name="cudaMemcpyAsync", bytes=20000)
    b.launch("Memcpy HtoD (Pinned -> Device)", 291, 301, 2, 900, stream=10, cat="gpu_memcpy",
             rt_name="cudaMemcpyAsync", bytes=30000)
    b.launch("Memcpy DtoD (Device -> Device)", 292, 400, 2, 900, stream=8, cat="gpu_memcpy", rt_name="cudaMemcpyAsync")
    bw = bandwidth(b.context())
    copies = {c.name: c for c in bw.copies}
    page = copies["Memcpy HtoD (Pageable -> Device)"]
    assert (page.calls, page.bytes, page.busy_ns, page.timed_calls) == (2, 24000, 3 * US, 2)
    assert page.gbps == pytest.approx(8.0) and page.max_gbps == pytest.approx(10.0)
    assert page.mean_gbps == pytest.approx(7.0) and page.pageable and page.kind == "Memcpy HtoD"
    assert copies["Memcpy HtoD (Pinned -> Device)"].gbps == pytest.approx(15.0)
    dtod = copies["Memcpy DtoD (Device -> Device)"]
    assert dtod.gbps is None and dtod.mean_gbps is None and dtod.calls == 1
    (series,) = [s for s in bw.series if s.kind == "Memcpy HtoD"]
    assert (series.points, series.point_sum_gbps, series.peak_gbps) == (4, pytest.approx(54.0), pytest.approx(25.0))


def sequence_trace():
    """layer_norm [0, 10) > native_layer_norm [1, 9) launches A, B, C at 2, 3, 4 (kernels [20, 23)); again at
    [30, 40) > [31, 39) (calls 32-34, kernels [50, 53)); layer_norm [60, 70) launches A, B only (calls 62, 63,
    kernels [80, 82)); block [100, 200) > layer_norm [110, 120) (A, B, C at 112-114, kernels [150, 153)) and
    gelu [130, 140) (D at 132, kernel [160, 161))."""
    b = TraceBuilder()
    b.step(1, 0, 300)
    for start, native in ((0, True), (30, True)):
        outer = b.op("aten::layer_norm", start, 10)
        inner = b.op("aten::native_layer_norm", start + 1, 8) if native else outer
        for i, k in enumerate("ABC"):
            b.launch(k, start + 2 + i, start + 20 + i, 1, inner)
    ln = b.op("aten::layer_norm", 60, 10)
    for i, k in enumerate("AB"):
        b.launch(k, 62 + i, 80 + i, 1, ln)
    b.op("block", 100, 100)
    ln = b.op("aten::layer_norm", 110, 10)
    for i, k in enumerate("ABC"):
        b.launch(k, 112 + i, 150 + i, 1, ln)
    gelu = b.op("aten::gelu", 130, 10)
    b.launch("D", 132, 160, 1, gelu)
    return b


def test_kernel_sequences():
    """Outermost operators: layer_norm [A, B, C] twice (3 + 3 µs of kernels, 10 + 10 µs of operator), the third
    layer_norm has two kernels only, block [A, B, C, D] once. With the filter "layer_norm": the outermost matches are
    the four layer_norm (native_layer_norm is inside one): [A, B, C] three times (HTA, starting at the smallest depth,
    would count two)."""
    seqs = kernel_sequences(sequence_trace().context())
    assert [(s.operator, s.kernels, s.count, s.kernel_ns, s.op_ns) for s in seqs.sequences] == [
        ("aten::layer_norm", ["A", "B", "C"], 2, 6 * US, 20 * US),
        ("block", ["A", "B", "C", "D"], 1, 4 * US, 100 * US),
    ]
    matched = kernel_sequences(sequence_trace().context(), "layer_norm")
    assert [(s.operator, s.kernels, s.count) for s in matched.sequences] == [("aten::layer_norm", ["A", "B", "C"], 3)]
    shorter = kernel_sequences(sequence_trace().context(), min_length=2).sequences
    assert [s.kernels for s in shorter][1:] == [["A", "B", "C", "D"], ["A", "B"]]  # ties: more device time first
    assert not kernel_sequences(sequence_trace().context(), limit=1).sequences[1:]
    assert kernel_sequences(sequence_trace().context(), limit=1).truncated


def test_operator_launch_delays():
    """The innermost aten operator of each launch: native_layer_norm (twice: first call 1 µs after the operator, its
    kernel 18 µs after the call), layer_norm [A, B] (62 - 60 = 2, 80 - 62 = 18), layer_norm [A, B, C] inside block
    (2, 150 - 112 = 38), gelu [D] (2, 160 - 132 = 28)."""
    ops = {(o.operator, tuple(o.kernels)): o for o in launch_stats(sequence_trace().context()).operators}
    native = ops[("aten::native_layer_norm", ("A", "B", "C"))]
    assert (native.count, native.launch_delay_ns, native.runtime_delay_ns) == (2, 2 * US, 36 * US)
    assert native.mean_launch_delay_ns == 1 * US
    short = ops[("aten::layer_norm", ("A", "B"))]
    assert (short.launch_delay_ns, short.runtime_delay_ns) == (2 * US, 18 * US)
    assert ops[("aten::layer_norm", ("A", "B", "C"))].runtime_delay_ns == 38 * US
    assert ops[("aten::gelu", ("D",))].runtime_delay_ns == 28 * US
    assert len(ops) == 4


def critical_trace():
    """Step [0, 100) on thread 1: K1 launched at 10 runs [15, 45); K2 launched at 20 runs [50, 60) (K1 still running:
    a 5 µs kernel gap); cudaDeviceSynchronize [30, 61) waits for K2; K3 launched at 70 runs [75, 120). mm [8, 14)
    holds K1's launch."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    mm = b.op("aten::mm", 8, 6)
    b.launch("K1", 10, 15, 30, mm, rt_dur=2)
    b.launch("K2", 20, 50, 10, 900, rt_dur=2)
    b.runtime("cudaDeviceSynchronize", 30, 31, 900)
    b.launch("K3", 70, 75, 45, 900, rt_dur=2)
    return b


def test_critical_path():
    """Backwards from K3's end (120, after the host's 100): K3 45 (gpu), launch delay 70-75, host [61, 70) since the
    sync returned, sync link [60, 61), K2 10, kernel gap [45, 50), K1 30, launch delay [10, 15), host [0, 10):
    cpu 19, gpu_compute 85, launch_delay 10, kernel_gap 5, sync 1 = 120. Host time on the path: mm [8, 10) 2, the
    rest (17) between operators."""
    cp = critical_path(critical_trace().context())
    (step,) = cp.steps
    assert step.span_ns == 120 * US and step.step == 1
    assert {k: v for k, v in step.breakdown_ns.items() if v} == {
        "cpu": 19 * US, "gpu_compute": 85 * US, "launch_delay": 10 * US, "kernel_gap": 5 * US, "sync": 1 * US}
    assert sum(step.breakdown_ns.values()) == step.span_ns
    items = {(i.kind, i.name): i.ns for i in cp.items}
    assert items == {("kernel", "K3"): 45 * US, ("kernel", "K1"): 30 * US, ("kernel", "K2"): 10 * US,
                     ("operator", NO_OPERATOR): 17 * US, ("operator", "aten::mm"): 2 * US}
    assert cp.breakdown_ns()["cpu"] == 19 * US


def test_critical_path_follows_a_helper_thread():
    """Thread 2 (no ranges, like autograd's) first acts at 40 (an operator [40, 60)) and launches K at 50, running
    [55, 150): K 95, launch delay 5, thread 2 host [40, 50) 10, then the training thread [0, 40) 40."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    op = b.op("autograd::engine::evaluate_function: MmBackward0", 40, 20, tid=2)
    b.launch("K", 50, 55, 95, op, tid=2)
    cp = critical_path(b.context())
    assert {k: v for k, v in cp.steps[0].breakdown_ns.items() if v} == {
        "cpu": 50 * US, "gpu_compute": 95 * US, "launch_delay": 5 * US}
    items = {(i.kind, i.name): i.ns for i in cp.items}
    assert items[("operator", "autograd::engine::evaluate_function: MmBackward0")] == 10 * US
    assert items[("operator", NO_OPERATOR)] == 40 * US


def test_critical_path_host_bound_step():
    """A step whose device work ends before its host end is host time to the end; a kernel never waited on is not
    on the path."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.launch("K", 10, 12, 5, 900)
    step = critical_path(b.context()).steps[0]
    assert step.breakdown_ns["cpu"] == 100 * US and step.span_ns == 100 * US


def test_merges_are_sums():
    """Two windows of rank 0 and one of rank 1: per-stream rows of one rank add up, ranks stay apart; named rows
    add up; critical-path steps are concatenated."""
    ctx = launch_trace().context()
    r0, r1 = TraceIdentity(path="a", rank=0), TraceIdentity(path="b", rank=1)
    idle = merge_idle_time([idle_time(ctx, r0), idle_time(ctx, r0), idle_time(ctx, r1)])
    s7 = [s for s in idle.streams if s.stream == 7]
    assert [(s.rank, s.host_wait_ns, s.events) for s in s7] == [(0, 170 * US, 8), (1, 85 * US, 4)]
    q = merge_queue_lengths([queue_lengths(ctx, r0), queue_lengths(ctx, r0)])
    q7 = [s for s in q.streams if s.stream == 7][0]
    assert (q7.points, q7.length_ns, q7.max_length) == (16, 418 * US, 3)
    launches = merge_launch_stats([launch_stats(ctx), launch_stats(ctx)])
    assert launches.total.launches == 12 and launches.total.max_cpu_ns == 60 * US
    ann = merge_annotation_times([annotation_times(ctx), annotation_times(ctx)])
    step = {r.name: r for r in ann.rows}[STEP]
    assert (step.device_ns, step.gpu_span_calls, step.gpu_span_max_ns, ann.device_ns) == (88 * US, 2, 110 * US,
                                                                                          98 * US)
    assert step.gpu_span_std_ns == 0.0
    bw = merge_bandwidth([bandwidth(ctx), bandwidth(ctx)])
    assert bw.copies[0].calls == 2 and bw.copies[0].gbps == pytest.approx(4.0)
    seq_ctx = sequence_trace().context()
    seqs = merge_kernel_sequences([kernel_sequences(seq_ctx), kernel_sequences(seq_ctx)], limit=1)
    assert [(s.operator, s.count) for s in seqs.sequences] == [("aten::layer_norm", 4)] and seqs.truncated
    cp = merge_critical_paths([critical_path(critical_trace().context())] * 2)
    assert len(cp.steps) == 2 and {(i.kind, i.name): i.ns for i in cp.items}[("kernel", "K3")] == 90 * US
    with pytest.raises(ValueError, match="kernel-wait"):
        merge_idle_time([idle_time(ctx), idle_time(ctx, kernel_wait_ns=1)])


def test_empty_traces():
    b = TraceBuilder()
    b.step(1, 0, 10)
    b.op("aten::relu", 1, 2)
    ctx = b.context()
    assert idle_time(ctx).streams == [] and queue_lengths(ctx).streams == []
    assert launch_stats(ctx).launches == [] and bandwidth(ctx).copies == []
    assert kernel_sequences(ctx).sequences == [] and annotation_times(ctx).rows == []
    cp = critical_path(ctx)
    assert cp.steps[0].breakdown_ns["cpu"] == 10 * US
