"""On a GPU, with ``profiler="streamprof"`` and ``StreamPipeline()``: the first window waits for auto's choice and
records the way the run settles on, read from the window's trace itself: the staged backbone's kernels on a side
stream, launched from the staging thread's ranges."""

import lightning as L
import pytest
from torch.utils.data import DataLoader
from traces_on_disk import load_trace, trace_files
from workloads import FrozenResNetClassifier, ResidentImages

from lightning_streamprof import StreamPipeline, StreamProfiler
from lightning_streamprof.names import PIPELINE_RANGE

pytestmark = pytest.mark.gpu


def test_the_first_window_records_the_chosen_pipelined_way_on_a_side_stream(tmp_path):
    # the benchmarks' frozen ResNet-50 (pipelined about 1.9x serial on an H200: auto decides in its quick stop),
    # in epochs of 64 batches (an epoch's end is left out of auto's timings, so that tiny epochs slow its trials)
    loader = DataLoader(ResidentImages(64 * 32), batch_size=32, shuffle=True, pin_memory=True, drop_last=True)
    pipeline = StreamPipeline()
    profiler = StreamProfiler(dirpath=str(tmp_path / "traces"), skip_first=5, warmup=1, active=3, every=0,
                              max_overhead=None)
    trainer = L.Trainer(max_steps=600, accelerator="gpu", devices=1, profiler=profiler, callbacks=[pipeline],
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, max_epochs=-1)
    trainer.fit(FrozenResNetClassifier(), loader)
    first = pipeline.rounds[0]  # auto's first round: its step and its choice
    assert first.choice.staged, pipeline.report()
    (window,) = profiler.windows
    assert window.first_step > first.step  # it waited for the choice
    recorded = window.pipeline
    assert recorded is not None and not recorded.in_trials and recorded.ways == [first.choice.label]
    (path,) = trace_files(tmp_path / "traces")
    events = load_trace(path)["traceEvents"]
    staged = [e for e in events if e.get("name", "").startswith(PIPELINE_RANGE)]
    assert staged, "no StreamPipeline range in the first window"
    streams = {e["args"].get("stream") for e in events if e.get("cat") == "kernel"}
    assert len(streams) >= 2, streams  # the backbone's kernels on the side stream, the head's on the default one
