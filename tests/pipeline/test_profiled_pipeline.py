"""The profiler and the pipeline on at once: the memory view with the staging thread, and what each says."""

from __future__ import annotations

import glob
import gzip
import json

import lightning as L
import pytest
from pipeline_models import Net, loader

from lightning_streamprof import StreamPipeline, StreamProfiler, analyze
from lightning_streamprof.profiling.window_sessions import MEMORY_THREADS_NOTE


def test_memory_view_with_the_staging_thread(tmp_path, caplog):
    """A staging thread makes the profiler record every thread, where torch drops every memory event: with
    ``profile_memory=True`` the windows record the training thread instead, and say so once."""
    profiler = StreamProfiler(dirpath=str(tmp_path), skip_first=3, warmup=1, active=2, every=4, repeat=2,
                              profile_memory=True, max_overhead=None)
    pipe = StreamPipeline(mode="on", staging_thread=True)
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, callbacks=[pipe], profiler=profiler, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Net(), loader("sized"))
    assert "staging thread" in pipe.report() and pipe.staged_calls[0].hits > 0
    traces = sorted(glob.glob(str(tmp_path / "**" / "*.pt.trace.json.gz"), recursive=True))
    assert len(traces) == 2
    for path in traces:
        events = json.load(gzip.open(path))["traceEvents"]
        assert sum(e.get("name") == "[memory]" for e in events) > 10
    result = analyze(str(tmp_path))
    assert result.memory.devices and result.memory.devices[0].peak_allocated_bytes > 0
    assert result.memory.operators
    assert caplog.text.count(MEMORY_THREADS_NOTE) == 1
    report = (next(tmp_path.glob("fit-*")) / "report.html").read_text()
    assert "windows record the training thread" in report and "Peak memory n/a" not in report


def test_all_threads_with_profile_memory_warns_at_construction():
    import pytest

    with pytest.warns(UserWarning, match="torch records no memory event in a session of all threads"):
        StreamProfiler(all_threads=True, profile_memory=True)


class PeakOverWindow(L.Callback):
    """The allocator's own peak over the recorded steps of a window (reset as the first one starts)."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last, self.peak = first, last, None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        import torch

        if trainer.global_step == self.first:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        import torch

        if trainer.global_step == self.last + 1:  # the step's counter moved on after its optimizer step
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()


@pytest.mark.gpu
@pytest.mark.parametrize("threaded", [True, False], ids=["thread", "inline"])
def test_memory_peak_on_cuda_with_the_pipeline_equals_the_allocators(tmp_path, threaded):
    import torch
    from test_gpu import Resident
    from torch.utils.data import DataLoader, TensorDataset

    x = torch.randint(0, 255, (64, 3, 64, 64), dtype=torch.uint8)
    y = torch.randint(0, 4, (64, 64, 64))
    profiler = StreamProfiler(dirpath=str(tmp_path), skip_first=20, warmup=1, active=3, every=0,
                              profile_memory=True, max_overhead=None)
    peak = PeakOverWindow(21, 23)
    pipe = StreamPipeline(mode="on", staging_thread=threaded)
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=40, callbacks=[pipe, peak], profiler=profiler,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Resident(), DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, pin_memory=True))
    result = analyze(str(tmp_path))
    [gpu] = [d for d in result.memory.devices if d.device != "CPU"]
    assert peak.peak is not None and abs(gpu.peak_allocated_bytes - peak.peak) <= 2**20, (gpu.peak_allocated_bytes,
                                                                                          peak.peak)
    assert len(gpu.curve) > 10 and pipe.staged_calls[0].hits > 30


@pytest.mark.gpu
def test_many_windows_beside_the_staging_thread_and_the_graph_detach_cupti_each_time(tmp_path):
    """CUPTI detached after each of 8 windows (``TEARDOWN_CUPTI=1``) and set up again for the next, while the staging
    thread replays the frozen calls' CUDA graph: every window is written with the device's kernels in it, training
    goes on, equal to serial."""
    import os
    import time

    import torch
    from test_gpu import Resident
    from torch.utils.data import DataLoader, TensorDataset

    x = torch.randint(0, 255, (64, 3, 64, 64), dtype=torch.uint8)
    y = torch.randint(0, 4, (64, 64, 64))

    class Paced(L.Callback):  # 10 steps take 0.3 s or more: each window's export is done before the next window
        def on_train_batch_end(self, *args):
            time.sleep(0.03)

    def fit(pipe, profiler):
        torch.manual_seed(0)
        net = Resident()
        callbacks = [Paced()] + ([pipe] if pipe else [])
        L.Trainer(accelerator="gpu", devices=1, max_steps=90, callbacks=callbacks, profiler=profiler,
                  logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False).fit(net, DataLoader(TensorDataset(x, y), batch_size=8))
        return net

    serial = fit(None, None)
    # without the analysis worker, so that a window's export (save, gzip, write) takes milliseconds
    profiler = StreamProfiler(dirpath=str(tmp_path), skip_first=5, warmup=1, active=2, every=10, repeat=8,
                              max_overhead=None, analyze=False)
    pipe = StreamPipeline(mode="on")
    started = time.perf_counter()
    piped = fit(pipe, profiler)
    # a window that waited for the previous one's CUPTI teardown would stall up to Kineto's 10 s each
    assert time.perf_counter() - started < 60
    if tuple(int(p) for p in torch.version.cuda.split(".")[:2]) >= (12, 6):
        assert os.environ.get("TEARDOWN_CUPTI") == "1"
    traces = sorted(glob.glob(str(tmp_path / "**" / "*.pt.trace.json.gz"), recursive=True))
    assert len(profiler.windows) == len(traces) == 8, profiler.summary()
    for path in traces:  # CUPTI set up again records the device in every window
        events = json.load(gzip.open(path))["traceEvents"]
        assert sum(e.get("cat") == "kernel" for e in events) > 10, path
    assert "the staged calls replay a CUDA graph" in pipe.report() and pipe.staged_calls[0].hits > 60
    for a, b in zip(piped.head.parameters(), serial.head.parameters()):
        torch.testing.assert_close(a, b)
