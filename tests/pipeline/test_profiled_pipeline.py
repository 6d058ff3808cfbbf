"""The profiler and the pipeline on at once: the memory view with the staging thread, and what each says."""

from __future__ import annotations

import glob
import gzip
import json

import lightning as L
from pipeline_models import Net, loader

from lightning_streamprof import StreamPipeline, StreamProfiler, analyze
from lightning_streamprof.profiling.profiler import MEMORY_THREADS_NOTE


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
