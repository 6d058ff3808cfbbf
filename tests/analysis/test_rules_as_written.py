"""Recommendations read as a person wrote them: a merged result names each device once with its value in each
window, every evidence line says something, and no advice is given that the trace shows the run already follows."""

from handbuilt import build
from tracebuilder import TraceBuilder

from lightning_streamprof.analysis import analyze_table, combine
from lightning_streamprof.report.findings import evidence_line, findings
from lightning_streamprof.results import Recommendation, TraceIdentity, WindowResults

MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
FP32_CONV = "implicit_convolve_sgemm"  # a float32 cuDNN kernel without Tensor Cores
BF16_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<c10::BFloat16>>"


def _busy_gpu_trace(step_us, kernel_us):
    """One step of ``step_us`` whose GPU 0 runs one kernel of ``kernel_us``: utilization kernel / step."""
    b = TraceBuilder()
    b.device_properties({"id": 0, "totalGlobalMem": 10**12, "numSms": 100, "computeMajor": 9})
    b.step(1, 0, step_us)
    b.launch("elementwise_kernel", 1, 2, kernel_us, b.op("aten::add", 1, 2), blocks=1.0, occupancy=0.5)
    return b


def _identity(window, rank):
    return TraceIdentity(path=f"w{window}/rank{rank}.pt.trace.json", run="run", window=window, first_step=10 * window,
                         rank=rank, world_size=2)


def _run(traces):
    """``{(window, rank): builder}`` analysed and merged as one run."""
    results = {key: analyze_table(b.table(), _identity(*key)) for key, b in traces.items()}
    windows = [WindowResults(window=w, first_step=10 * w,
                             ranks=[r for (ww, _), r in sorted(results.items()) if ww == w])
               for w in sorted({w for w, _ in results})]
    return combine(list(results.values()), "run"), windows


def _rec(result, rule):
    found = [r for r in result.recommendations if r.id == rule]
    return found[0] if found else None


def test_a_merged_result_names_each_device_once():
    """GPU 0 of rank 0 is busy 33.3% in window 0 and 23.9% in window 1; GPU 0 of rank 1 40% in window 0."""
    merged, _ = _run({(0, 0): _busy_gpu_trace(300, 100), (1, 0): _busy_gpu_trace(1000, 239),
                      (0, 1): _busy_gpu_trace(500, 200)})
    rec = _rec(merged, "low_gpu_utilization")
    assert "(GPU 0 of rank 0: 33.3% in window 0, 23.9% in window 1; GPU 0 of rank 1 at 40.0%)" in rec.message
    assert rec.message.count("GPU 0 of rank 0") == 1 and "rank 0 GPU 0" not in rec.message
    single = analyze_table(_busy_gpu_trace(300, 100).table())
    assert _rec(single, "low_gpu_utilization").message.startswith(
        "The GPU is busy less than half of the step time (GPU 0 at 33.3%).")


def test_every_evidence_line_says_something():
    """Two windows of the hand-built trace (five rules fire in each): every finding lists each window with a line of
    numbers, and a recommendation without a summary or numbers still gets a line."""
    merged, windows = _run({(0, 0): build(), (1, 0): build()})
    found = findings(merged, windows)
    assert {f.id for f in found} >= {"dataloader", "low_gpu_utilization", "tensor_cores", "memory", "host_bound"}
    for finding in found:
        assert [label for label, _ in finding.per_trace] == ["window 0 (step 0), rank 0", "window 1 (step 10), rank 0"]
        assert all(line.strip() and any(c.isdigit() for c in line) for _, line in finding.per_trace), finding
    gpu = next(f for f in found if f.id == "low_gpu_utilization")
    assert gpu.per_trace[0][1] == "GPU 1 busy 8.0%, idle 0.23 ms of 0.25 ms"
    assert evidence_line(Recommendation(id="x", message="Something is slow. Do this.", evidence={"devices": [1]})) \
        == "devices 1"
    assert evidence_line(Recommendation(id="x", message="Something is slow. Do this.")) == "Something is slow"


def _conv_trace(conv_kernel_us, bf16_kernel_us):
    """A float32 convolution kernel without Tensor Cores (an eligible operator's) and, optionally, a bfloat16
    elementwise kernel, on a compute-capability-8 GPU."""
    b = TraceBuilder()
    b.device_properties({"id": 0, "totalGlobalMem": 10**12, "numSms": 100, "computeMajor": 8})
    b.step(1, 0, 200)
    b.launch(FP32_CONV, 2, 5, conv_kernel_us, b.op("aten::conv2d", 1, 90), blocks=2.0, occupancy=0.5)
    if bf16_kernel_us:
        b.launch(BF16_ADD, 100, 105, bf16_kernel_us, b.op("aten::add", 99, 5), blocks=2.0, occupancy=0.5)
    return analyze_table(b.table())


def test_mixed_precision_is_not_advised_to_a_run_that_uses_it():
    fp32 = _rec(_conv_trace(90, 0), "tensor_cores")
    assert 'precision="bf16-mixed"' in fp32.message
    amp = _rec(_conv_trace(90, 60), "tensor_cores")  # 40% of the kernel time in bfloat16
    assert amp is not None and "bf16-mixed" not in amp.message
    assert amp.message.startswith("Mixed precision is on (40.0% of the kernel time is in half or bfloat16 kernels)")
    assert amp.evidence["reduced_precision_share"] == 0.4


def test_memory_advice_leaves_out_mixed_precision_when_it_is_on():
    """The hand-built trace peaks at 4500 of 4800 B and 60% of its kernel time is bfloat16 GEMMs."""
    rec = _rec(analyze_table(build().table()), "memory")
    assert "mixed precision" not in rec.message.lower() and "activation checkpointing" in rec.message
    assert rec.message.startswith("Allocated memory peaks near the GPU's capacity (GPU 0 at 93.8% of")


def _loader_steps(kernel_during_fetch):
    """Three 100 µs steps, each waiting 20 µs in a multi-process DataLoader's __next__ at its start; with
    ``kernel_during_fetch`` each step's kernel runs on into the next step's wait, to its end."""
    b = TraceBuilder()
    b.device_properties({"id": 0, "totalGlobalMem": 10**12, "numSms": 100, "computeMajor": 9})
    for i in range(3):
        t = i * 100
        b.step(i + 1, t, 100)
        b.annotation(MULTI, t + 1, 20)
        op = b.op("aten::mm", t + 30, 60)
        b.launch("sm90_xmma_gemm_bf16bf16_bf16f32", t + 31, t + 35, 90 if kernel_during_fetch else 60, op)
    return analyze_table(b.table())


def test_a_loader_the_gpu_works_through_is_not_the_bottleneck():
    """The fetch waits 20 µs per step. When the previous step's kernel keeps the GPU busy through it (it runs
    [t+35, t+125)), the wait costs nothing in steps 2 and 3 and no DataLoader advice is given; otherwise it is."""
    assert _rec(_loader_steps(kernel_during_fetch=False), "dataloader") is not None
    hidden = _loader_steps(kernel_during_fetch=True)
    waits = [s.breakdown_ns["dataloader"] for s in hidden.steps.per_step]
    assert waits[0] == 20_000 and waits[1:] == [0, 0]
    assert _rec(hidden, "dataloader") is None


def _launch_bound(extra=None):
    """A 100 µs step whose training thread launches 20 short kernels; ``extra(builder)`` adds to it."""
    b = TraceBuilder()
    b.device_properties({"id": 0, "totalGlobalMem": 10**12, "numSms": 100, "computeMajor": 9})
    b.step(1, 0, 100)
    conv = b.op("aten::conv2d", 2, 90)
    for i in range(20):
        b.launch("conv_kernel", 3 + 4 * i, 5 + 4 * i, 1, conv)
    if extra:
        extra(b)
    return _rec(analyze_table(b.table()), "host_bound")


def test_host_bound_advice_leaves_out_what_the_run_already_does():
    plain = _launch_bound()
    assert "StreamPipeline's staging thread" in plain.message
    assert 'torch.compile(mode="reduce-overhead")' in plain.message
    staged = _launch_bound(lambda b: b.annotation("[pl][profile][StreamPipeline].stage_next_batch", 92, 5))
    assert "staging thread" not in staged.message
    graphed = _launch_bound(lambda b: b.runtime("cudaGraphLaunch", 95, 2, 0))
    assert "torch.compile" not in graphed.message and "it replays 1 per step already" in graphed.message
    assert graphed.evidence["graph_launches_per_step"] == 1
