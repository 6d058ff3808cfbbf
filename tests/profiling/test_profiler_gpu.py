import pytest
from traces_on_disk import load_trace, step_numbers, trace_files
from helpers import fit

from lightning_streamprof import StreamProfiler
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.operators import operator_stats
from lightning_streamprof.trace import Kind, read_trace

pytestmark = pytest.mark.gpu


def test_cuda_windows_record_kernels(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=2, every=10, max_overhead=None)
    trainer = fit(prof, tmp_path, max_steps=30, accelerator="gpu")
    assert trainer.global_step == 30
    files = trace_files(tmp_path / "t")
    assert len(files) == 3
    raw = load_trace(files[0])
    assert raw["deviceProperties"] and raw["distributedInfo"]["rank"] == 0
    assert step_numbers(raw) == [4, 5]
    table = read_trace(files[0])
    assert (table.kind == Kind.KERNEL).sum() > 0
    assert (table.kind == Kind.RUNTIME).sum() > 0
    stats = {s.name: s for s in operator_stats(TraceContext(table))}
    assert stats["aten::addmm"].device_self_ns > 0  # kernels are linked to the operator that launched them


def test_cuda_windows_carry_the_utilization_counter_track_and_their_analysis(tmp_path):
    from lightning_streamprof import names

    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=2, every=10, max_overhead=None)
    fit(prof, tmp_path, max_steps=30, accelerator="gpu")
    windows = prof.windows
    assert len(windows) == 3 and all(w.analysis is not None and w.metrics for w in windows)
    for f in trace_files(tmp_path / "t"):  # written after the window's analysis, with its counter track
        counters = [e for e in load_trace(f)["traceEvents"] if e.get("ph") == "C"]
        assert {e["name"] for e in counters} >= {names.UTILIZATION_COUNTER}
