"""GPU time per Lightning hook (``annotation_times(ctx, hooks=True)``, in every result as ``result.hta.hooks``).

The built trace (µs; thread 1 is the training thread, thread 2 an autograd-like thread without ranges):

    step 1 [0, 10000)
    run_training_batch              [5, 8000)
      optimizer_step (LightningModule) [10, 7900)
        Optimizer.step#SGD.step     [12, 7800)       not a hook: its kernels are optimizer_step's own
          training_step (Strategy)  [20, 3000)
            K1   call 30  -> 800 on stream 7
            K2   call 40  -> 500 on stream 9         (a side stream)
            graph call 50 (cudaGraphLaunch) -> 300 + 400 on stream 7, one correlation id
          backward (Strategy)       [3100, 6000)
            K3   call 4000 on thread 2 -> 1000       (owned by the training thread's innermost hook at 4000)
          K4   call 7000 -> 600                      (optimizer_step's own)
    on_after_batch_transfer (LightningModule) [8100, 9000)
      K5   call 8200 -> 200, a memcpy call 8300 -> 100 (device, not kernel)
    K6   call 9500 -> 100                            (inside no hook)
    K7   200 with no launch call in the trace

Own kernel time: training_step 800 + 500 + 300 + 400 = 2000, backward 1000, optimizer_step 600,
on_after_batch_transfer 200; outside 100; without a launch 200; all kernels 4100. With nested hooks:
optimizer_step 3600, run_training_batch 3600.
"""

import gzip
import json
import os

import pytest

from lightning_streamprof.analysis import analyze_table, combine
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.user_ranges import annotation_times
from lightning_streamprof.names import hook_label
from lightning_streamprof.report.hta_sections import hook_sentence
from lightning_streamprof.results import TraceIdentity
from lightning_streamprof.trace import read_trace
from tracebuilder import TraceBuilder

US = 1000
PL = "[pl][profile]"
RUN = PL + "run_training_batch"
OPT = PL + "[LightningModule]Model.optimizer_step"
STEP = PL + "[Strategy]SingleDeviceStrategy.training_step"
BACKWARD = PL + "[Strategy]SingleDeviceStrategy.backward"
AFTER = PL + "[LightningModule]Model.on_after_batch_transfer"
TRACES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "traces")


def hook_trace() -> TraceBuilder:
    b = TraceBuilder()
    b.step(1, 0, 10000)
    b.annotation(RUN, 5, 7995)
    b.annotation(OPT, 10, 7890)
    b.annotation("Optimizer.step#SGD.step", 12, 7788)
    b.annotation(STEP, 20, 2980)
    b.launch("K1", 30, 100, 800, 900)
    b.launch("K2", 40, 200, 500, 900, stream=9)
    graph = b.runtime("cudaGraphLaunch", 50, 5, 900)
    b.kernel("G1", 1000, 300, 900, correlation=graph)
    b.kernel("G2", 1400, 400, 900, correlation=graph)
    b.annotation(BACKWARD, 3100, 2900)
    b.launch("K3", 4000, 4100, 1000, 900, tid=2)
    b.launch("K4", 7000, 7100, 600, 900)
    b.annotation(AFTER, 8100, 900)
    b.launch("K5", 8200, 8300, 200, 900)
    b.launch("Memcpy HtoD (Pinned -> Device)", 8300, 8600, 100, 900, cat="gpu_memcpy", rt_name="cudaMemcpyAsync",
             bytes=1000)
    b.launch("K6", 9500, 9600, 100, 900)
    b.kernel("K7", 9800, 200, 900)  # no correlation: no launch call
    return b


def _by_name(times):
    return {r.name: r for r in times.rows}


def test_each_hook_gets_the_kernels_it_launched():
    times = annotation_times(hook_trace().context(), hooks=True)
    rows = _by_name(times)
    assert "Optimizer.step#SGD.step" not in rows  # not a hook
    own = {n: r.self_kernel_ns for n, r in rows.items()}
    assert own == {RUN: 0, OPT: 600 * US, STEP: 2000 * US, BACKWARD: 1000 * US, AFTER: 200 * US}
    assert rows[STEP].kernels == 4 and rows[STEP].calls == 1 and rows[STEP].host_ns == 2980 * US
    assert rows[OPT].kernel_ns == rows[RUN].kernel_ns == 3600 * US
    assert (rows[AFTER].self_device_ns, rows[AFTER].device_ns) == (300 * US, 300 * US)
    assert (times.kernel_ns, times.outside_kernel_ns) == (4100 * US, 100 * US)
    # the hooks' own time, the time outside them and the kernels without a launch add up to all kernels
    assert sum(own.values()) + times.outside_kernel_ns + 200 * US == times.kernel_ns


def test_the_sentence_names_the_largest_hooks_per_step():
    result = analyze_table(hook_trace().table())
    assert hook_sentence(result) == ("GPU time per step by Lightning hook: training_step 2.00 ms (of 4.10 ms of "
                                     "kernels), backward 1.00 ms, optimizer_step 0.60 ms")


def test_hooks_merge_exactly_over_windows_and_ranks():
    table = hook_trace().table()
    parts = [analyze_table(table, TraceIdentity(path=f"w{w}r{r}", run="fit", window=w, rank=r))
             for w in (0, 1) for r in (0, 1)]
    merged = combine(parts, run="fit").hta.hooks
    rows = _by_name(merged)
    assert rows[STEP].self_kernel_ns == 4 * 2000 * US and rows[STEP].calls == 4
    assert rows[STEP].host_ns == 4 * 2980 * US and rows[OPT].kernel_ns == 4 * 3600 * US
    assert (merged.kernel_ns, merged.outside_kernel_ns) == (4 * 4100 * US, 4 * 100 * US)


def test_labels():
    assert hook_label(STEP, kind=False) == "training_step"
    assert hook_label(PL + "[Callback]EarlyStopping{'monitor': 'val.loss'}.on_train_epoch_end") == \
        "EarlyStopping.on_train_epoch_end (Callback)"
    assert hook_label("[LightningModule]Model.on_after_batch_transfer") == "on_after_batch_transfer (LightningModule)"


def _naive_hook_times(path: str) -> tuple[dict[str, float], float, float]:
    """An independent reading of a real trace: each kernel to the innermost hook range on its launch call's
    thread that contains the call's start (the training thread's for a thread without hook ranges)."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    hooks = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith(PL)]
    threads = {e["tid"] for e in hooks}
    training = next(e["tid"] for e in events if e.get("name", "").startswith("ProfilerStep#")
                    and e.get("cat") == "user_annotation")
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    own: dict[str, float] = {}
    outside = total = 0.0
    for k in (e for e in events if e.get("cat") == "kernel"):
        total += k["dur"]
        call = calls.get(k["args"].get("correlation"))
        if call is None:
            continue
        tid = call["tid"] if call["tid"] in threads else training
        inner = [h for h in hooks if h["tid"] == tid and h["ts"] <= call["ts"] < h["ts"] + h["dur"]]
        if not inner:
            outside += k["dur"]
            continue
        hook = min(inner, key=lambda h: h["dur"])
        own[hook["name"]] = own.get(hook["name"], 0.0) + k["dur"]
    return own, outside, total


@pytest.mark.parametrize("name", ["streamprof_augment", "lightning_pytorchprofiler_augment"])
def test_real_lightning_traces_match_an_independent_reading(name):
    """H200 traces of a real Lightning fit (StreamProfiler's and Lightning's PyTorchProfiler's)."""
    path = os.path.join(TRACES, f"{name}.pt.trace.json.gz")
    own, outside, total = _naive_hook_times(path)
    times = annotation_times(TraceContext(read_trace(path)), hooks=True)
    got = {r.name: r.self_kernel_ns / US for r in times.rows if r.self_kernel_ns}
    assert got.keys() == own.keys()
    for n, v in own.items():
        assert got[n] == pytest.approx(v, abs=0.01)
    assert times.outside_kernel_ns / US == pytest.approx(outside, abs=0.01)
    assert times.kernel_ns / US == pytest.approx(total, abs=0.01)
    # the hooks' own GPU time and the time outside every hook are all the kernels' time (each has a launch)
    assert sum(r.self_kernel_ns for r in times.rows) + times.outside_kernel_ns == times.kernel_ns


def test_a_real_lightning_cpu_run(tmp_path):
    """A Lightning fit on CPU under StreamProfiler: each window's analysis (made off the training thread) holds
    every hook with its host time, equal to its ranges' durations in the trace, and no GPU time."""
    from helpers import fit

    from lightning_streamprof import StreamProfiler
    from lightning_streamprof.report.hta_sections import render_text

    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=3, every=100, max_overhead=None)
    fit(prof, tmp_path, max_steps=8)
    (window,) = prof.windows
    hooks = window.analysis.hta.hooks
    with gzip.open(window.path) as f:
        events = json.load(f)["traceEvents"]
    host: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "user_annotation" and e["name"].startswith(PL):
            host[e["name"]] = host.get(e["name"], 0.0) + e["dur"]
    rows = _by_name(hooks)
    assert rows.keys() == host.keys() and STEP in rows
    for name, us in host.items():
        assert rows[name].host_ns / US == pytest.approx(us, abs=0.002)
        assert rows[name].kernel_ns == rows[name].device_ns == 0
    assert rows[STEP].calls == 3
    text = render_text(window.analysis)
    assert "No device work in the traces: the hooks' host time only." in text and "GPU (ms)" not in text


def test_a_real_h200_run_with_a_cuda_graph_on_a_side_stream():
    """StreamPipeline replays the frozen encoder as a CUDA graph on its staging thread, on side stream 46: the
    graph's 165 kernels (1,361.7 µs, one correlation id per replay) belong to the ``stage_on_thread`` range that
    launched them, and the hooks' own time with the time outside them is every kernel's time."""
    path = os.path.join(TRACES, "h200", "streamprof_frozen_graph.pt.trace.json.gz")
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    graphs = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    replayed = [e for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") in graphs]
    assert len(graphs) == 5 and len(replayed) == 165 and {e["args"]["stream"] for e in replayed} == {46}
    result = analyze_table(read_trace(path))
    hooks = result.hta.hooks
    stage = _by_name(hooks)[PL + "[StreamPipeline].stage_on_thread"]
    assert stage.self_kernel_ns / US == pytest.approx(sum(e["dur"] for e in replayed), abs=0.01)
    assert sum(r.self_kernel_ns for r in hooks.rows) + hooks.outside_kernel_ns == hooks.kernel_ns == 4_640_740
    own, outside, total = _naive_hook_times(path)
    assert {r.name: r.self_kernel_ns / US for r in hooks.rows if r.self_kernel_ns} == pytest.approx(own, abs=0.01)
    assert hook_sentence(result) == ("GPU time per step by Lightning hook: backward 0.46 ms (of 0.93 ms of kernels), "
                                     "stage_on_thread 0.27 ms, training_step 0.15 ms")
