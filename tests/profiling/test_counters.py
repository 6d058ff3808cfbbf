"""Saved traces carry GPU utilization as a counter track (``"ph": "C"``), and analyse as before; the exporter
writes a window once the worker has analysed and gzipped it, waiting for it at most ``timeout`` seconds."""

import gzip
import json
import os

import orjson
import pytest

from lightning_streamprof import names
from lightning_streamprof.api import analyze
from lightning_streamprof.profiling.counters import add_counters, utilization_counters
from lightning_streamprof.profiling.exporter import TraceExporter
from lightning_streamprof.results import TraceIdentity, to_builtins

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(os.path.dirname(HERE), "fixtures", "traces", "frozen_backbone.pt.trace.json.gz")


def test_counters_follow_the_timeline():
    result = analyze(FIXTURE)
    events = utilization_counters(result)
    line = result.gpu[0].timeline
    util = [e for e in events if e["name"] == names.UTILIZATION_COUNTER]
    assert len(util) == len(line.starts_ns) + 1 and util[-1]["args"]["%"] == 0.0
    assert util[0]["ts"] == line.starts_ns[0] / 1000 and util[0]["pid"] == result.gpu[0].device
    assert [e["args"]["%"] for e in util[:-1]] == [round(100 * u, 2) for u in line.utilization]
    assert {e["ph"] for e in events} == {"C"}


@pytest.mark.parametrize("spacing", [b'"traceEvents": [', b'"traceEvents":[', b'"traceEvents" :\n  ['])
def test_splice(spacing):
    raw = b'{"schemaVersion": 1, ' + spacing + b'{"ph": "X", "name": "a", "ts": 1, "dur": 2}], "x": 1}'
    out = json.loads(add_counters(raw, [{"ph": "C", "name": "u", "ts": 1, "args": {"%": 5}}]))
    assert [e["ph"] for e in out["traceEvents"]] == ["C", "X"] and out["x"] == 1
    empty = json.loads(add_counters(b'{"traceEvents": [ ]}', [{"ph": "C"}]))
    assert empty["traceEvents"] == [{"ph": "C"}]
    assert add_counters(b'{"other": []}', [{"ph": "C"}]) == b'{"other": []}'


def test_a_trace_with_counters_analyses_the_same(tmp_path):
    raw = gzip.decompress(open(FIXTURE, "rb").read())
    before = analyze(FIXTURE)
    path = tmp_path / "with_counters.pt.trace.json"
    path.write_bytes(add_counters(raw, utilization_counters(before)))
    after = analyze(str(path))
    assert orjson.loads(path.read_bytes())["traceEvents"][0]["ph"] == "C"
    strip = lambda r: {k: v for k, v in to_builtins(r).items() if k not in ("traces", "run", "runs")}  # noqa: E731
    assert strip(after) == strip(before)


def _exported(tmp_path, exporter, name="w0"):
    local = tmp_path / f"streamprof-{name}.pt.trace.json"
    local.write_bytes(gzip.decompress(open(FIXTURE, "rb").read()))
    target = tmp_path / "out" / f"{name}.pt.trace.json.gz"
    exporter.submit(str(local), TraceIdentity(path=str(target), window=0), steps=(0, 1), device_work=True)
    return local, target


def test_the_exporter_writes_the_counter_track_of_its_analysis(tmp_path):
    exporter = TraceExporter(timeout=60)
    local, target = _exported(tmp_path, exporter)
    assert exporter.wait(120)
    exporter.close(10)
    events = json.loads(gzip.decompress(target.read_bytes()))["traceEvents"]
    assert {e["name"] for e in events if e.get("ph") == "C"} >= {names.UTILIZATION_COUNTER}
    (window,) = exporter.results
    assert window.analysis is not None and window.metrics and window.size_bytes == len(gzip.decompress(
        open(FIXTURE, "rb").read()))
    assert not local.exists()


def test_a_late_analysis_delays_the_write_at_most_timeout_seconds(tmp_path, monkeypatch):
    import threading
    import time

    from lightning_streamprof.profiling import worker

    release = threading.Event()
    real = worker.AnalysisWorker.analyze
    monkeypatch.setattr(worker.AnalysisWorker, "analyze", lambda self, *a: (release.wait(30), real(self, *a))[1])
    exporter = TraceExporter(timeout=0.5)
    start = time.perf_counter()
    local, target = _exported(tmp_path, exporter)
    while not target.exists():
        assert time.perf_counter() - start < 10
        time.sleep(0.05)
    events = json.loads(gzip.decompress(target.read_bytes()))["traceEvents"]
    assert not any(e.get("ph") == "C" for e in events)  # written without the track, not later than needed
    release.set()
    assert exporter.wait(120)
    exporter.close(10)
    (window,) = exporter.results
    assert window.analysis is not None and exporter.ready  # the analysis still reaches the results
    assert not local.exists()
