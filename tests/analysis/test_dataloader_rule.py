"""The DataLoader rule gives advice that can help: more workers only for a loader without them, nothing when the
loader keeps up in most steps."""

from tracebuilder import TraceBuilder

from lightning_streamprof.analysis import analyze_table

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def _trace(loader_name, waits):
    """One 100 µs step per entry of ``waits``, each starting with a DataLoader range of that many µs."""
    b = TraceBuilder()
    for i, wait in enumerate(waits):
        b.step(i + 1, i * 100, 100)
        if wait:
            b.annotation(loader_name, i * 100 + 1, wait)
        b.op("aten::mm", i * 100 + 50, 40)
    return analyze_table(b.table())


def _loader(result):
    return [r for r in result.recommendations if r.id == "dataloader"]


def test_single_process_loader_is_told_to_use_workers():
    result = _trace(SINGLE, [20, 20, 20])
    (rec,) = _loader(result)
    assert result.host.loader_workers is False
    assert "num_workers" in rec.message and rec.evidence["workers"] is False
    assert rec.evidence["share"] == 0.2


def test_loader_with_workers_is_not_told_to_add_workers():
    result = _trace(MULTI, [20, 20, 20])
    (rec,) = _loader(result)
    assert result.host.loader_workers is True
    assert "already reads with worker processes" in rec.message and "num_workers" not in rec.message
    assert "more workers" not in rec.message.replace("Rather than more workers", "")


def test_loader_that_keeps_up_in_most_steps_gets_no_advice():
    """One step after validation waits 60 µs (mean 20% of the step), the others 1 µs: the median step is fine."""
    result = _trace(SINGLE, [60, 1, 1])
    assert result.steps.breakdown_ms["dataloader"] / result.steps.mean_ms > 0.05
    assert _loader(result) == []


def test_no_dataloader_range():
    assert _trace(SINGLE, [0, 0]).host.loader_workers is None


def test_a_run_without_a_gpu_is_not_advised_what_needs_cuda():
    """A CPU-only trace: no pin_memory, no augmentation "on the GPU"; the same loader beside a kernel gets both."""
    (cpu,) = _loader(_trace(MULTI, [20, 20, 20]))
    assert "pin_memory" not in cpu.message and "GPU" not in cpu.message and "persistent_workers=True" in cpu.message
    b = TraceBuilder()
    for i in range(3):
        b.step(i + 1, i * 100, 100)
        b.annotation(MULTI, i * 100 + 1, 20)
        mm = b.op("aten::mm", i * 100 + 50, 40)
        b.launch("gemm_kernel", i * 100 + 52, i * 100 + 60, 5, mm)
    (gpu,) = _loader(analyze_table(b.table()))
    assert "pin_memory=True" in gpu.message and "random augmentation on the GPU" in gpu.message
