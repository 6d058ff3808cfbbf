"""The exporter's bounded waits: pending windows are abandoned after the time-out without leaving their temporary
files, and nothing blocks when the profiler is freed."""

import threading
import time

import pytest
from faultkit import leftovers, private_tmp  # noqa: F401

from lightning_streamprof.profiling import exporter as exporter_module
from lightning_streamprof.profiling.exporter import TraceExporter
from lightning_streamprof.results import TraceIdentity


def _local(directory, i):
    path = directory / f"streamprof-{i}.pt.trace.json"
    path.write_text('{"traceEvents": []}')
    return str(path)


def _submit(exp, directory, target, n):
    for i in range(n):
        exp.submit(_local(directory, i), TraceIdentity(path=str(target / f"w{i}.pt.trace.json.gz"), window=i),
                   steps=(i, i + 1))


@pytest.fixture
def gate(monkeypatch):
    """Writes wait until the returned event is set."""
    event = threading.Event()
    real = exporter_module.write_atomic
    monkeypatch.setattr(exporter_module, "write_atomic", lambda path, data: (event.wait(), real(path, data)))
    yield event
    event.set()


def test_pending_windows_are_abandoned_without_temporary_files(tmp_path, private_tmp, gate):
    exp = TraceExporter(analyze=False, timeout=30)
    _submit(exp, private_tmp, tmp_path, 3)
    start = time.perf_counter()
    assert exp.finish(0.3) is False and time.perf_counter() - start < 2
    assert leftovers(private_tmp) == []
    assert exp.problems.drain() == ["3 window(s) not written within 0.3 s; abandoned"]
    gate.set()
    assert exp.wait(5)
    exp.close(1)
    assert leftovers(private_tmp, tmp_path) == []


def test_release_never_waits_and_pending_work_still_finishes(tmp_path, private_tmp, gate):
    exp = TraceExporter(analyze=False, timeout=30)
    _submit(exp, private_tmp, tmp_path, 2)
    start = time.perf_counter()
    exp.release()
    assert time.perf_counter() - start < 0.1
    gate.set()
    assert exp.wait(10) and exp.written == 2  # handed-over windows are still written
    assert sorted(p.name for p in tmp_path.glob("w*.gz")) == ["w0.pt.trace.json.gz", "w1.pt.trace.json.gz"]
    assert leftovers(private_tmp, tmp_path) == []
