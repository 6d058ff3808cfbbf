"""Nothing is left open: the analysis worker's pipes are closed and its exit collected on every path (a close that
waits and one that does not, a worker that exits, hangs or answers nonsense, one that exited between requests, an
abandoned finish, ``release()`` as ``__del__`` calls it), and a fit, a failing fit and each command run with
``-X dev -W error::ResourceWarning`` print no ResourceWarning."""

import contextlib
import gc
import os
import subprocess
import sys
import time
import warnings

import pytest
from tracebuilder import TraceBuilder

from lightning_streamprof.profiling.exporter import TraceExporter
from lightning_streamprof.profiling.worker import AnalysisError, AnalysisWorker
from lightning_streamprof.results import TraceIdentity

TESTS = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(TESTS, "fixtures", "traces", "frozen_backbone.pt.trace.json.gz")
#: a worker that takes one request and never answers it, then exits at the end of its input
SILENT = "import sys; sys.stdin.readline(); sys.stdin.read()"
#: a worker that answers one request and exits
ONCE = "import sys; sys.stdin.readline(); print('{\"error\": \"x: no\"}', flush=True)"


@pytest.fixture
def started(monkeypatch):
    """Every worker process started during the test."""
    procs = []
    real_start = AnalysisWorker._start

    def start(self):
        procs.append(real_start(self))
        return procs[-1]

    monkeypatch.setattr(AnalysisWorker, "_start", start)
    return procs


@contextlib.contextmanager
def no_resource_warning(procs):
    """Fails when dropping ``procs`` (and whatever else the block left) gives a ResourceWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        procs.clear()
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def _released(proc) -> bool:
    return proc.returncode is not None and proc.stdin.closed and proc.stdout.closed


def _all_released(procs, timeout: float = 20.0) -> bool:
    """Whether every process has exited, its status collected and its pipes closed, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not all(_released(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)
    return all(_released(p) for p in procs)


def _trace(tmp_path) -> str:
    b = TraceBuilder()
    b.step(0, 0, 100)
    b.op("aten::mm", 5, 50)
    return str(b.write(tmp_path / "local.pt.trace.json", compress=False))


@pytest.mark.parametrize("wait", [True, False])
def test_closing_the_worker_closes_its_pipes(tmp_path, started, wait):
    with no_resource_warning(started):
        w = AnalysisWorker()
        done = w.analyze(_trace(tmp_path), TraceIdentity(path=str(tmp_path / "w0.pt.trace.json.gz")))
        assert done.analysis is not None and len(started) == 1
        w.close(wait=wait)
        if wait:
            assert _released(started[0])  # at once
        assert _all_released(started)  # was: its output pipe left open


@pytest.mark.parametrize("behaviour", ["exit", "hang", "garbage"])
def test_a_failed_worker_is_collected_and_its_pipes_closed(tmp_path, started, monkeypatch, behaviour):
    code = {"exit": "import os, sys; sys.stdin.readline(); os._exit(3)",
            "hang": "import sys, time; sys.stdin.readline(); time.sleep(60)",
            "garbage": "import sys\nfor line in sys.stdin: print('{\"ok\": 5}', flush=True)"}[behaviour]
    monkeypatch.setattr(AnalysisWorker, "argv", (sys.executable, "-c", code))
    with no_resource_warning(started):
        w = AnalysisWorker(timeout=1.0)
        with pytest.raises(AnalysisError):
            w.analyze(_trace(tmp_path), TraceIdentity(path="w0"))
        assert _all_released(started)  # was: left to the garbage collector, open
        w.close()


def test_a_worker_that_exited_between_requests_is_collected(tmp_path, started, monkeypatch):
    monkeypatch.setattr(AnalysisWorker, "argv", (sys.executable, "-c", ONCE))
    with no_resource_warning(started):
        w = AnalysisWorker()
        assert w.analyze(_trace(tmp_path), TraceIdentity(path="w0")).error == "x: no"
        started[0].wait(20)
        assert w.analyze(_trace(tmp_path), TraceIdentity(path="w1")).error == "x: no"  # a new worker
        assert len(started) == 2 and _all_released(started[:1])
        w.close()
        assert _all_released(started)


def test_an_abandoned_finish_then_release_close_the_worker(tmp_path, started, monkeypatch):
    """``finish`` gives up an analysis still running; ``release`` (what ``__del__`` calls) stops the worker without
    waiting: it still exits and its pipes are closed."""
    monkeypatch.setattr(AnalysisWorker, "argv", (sys.executable, "-c", SILENT))
    with no_resource_warning(started):
        exp = TraceExporter(timeout=30)
        exp.submit(_trace(tmp_path), TraceIdentity(path=str(tmp_path / "w0.pt.trace.json.gz"), window=0),
                   steps=(0, 1))
        deadline = time.monotonic() + 30
        while exp.written < 1 and time.monotonic() < deadline:  # written at once; its analysis never ends
            time.sleep(0.02)
        assert exp.finish(0.5) is False  # the analysis is abandoned
        assert exp.problems.drain() == ["analysis of 1 window not finished within 0.5 s"]
        exp.release()
        assert _all_released(started)  # was: the worker's output pipe left open
        exp.close(5)


def test_release_stops_an_idle_worker(started):
    with no_resource_warning(started):
        exp = TraceExporter()
        exp.start_worker()
        assert len(started) == 1
        exp.release()
        assert _all_released(started)


def _dev(args, cwd, timeout=300) -> subprocess.CompletedProcess:
    """``python -X dev -W error::ResourceWarning ARGS``, its stderr checked for any unclosed resource."""
    path = os.pathsep.join(filter(None, (TESTS, os.environ.get("PYTHONPATH"))))
    out = subprocess.run([sys.executable, "-X", "dev", "-W", "error::ResourceWarning", *args], capture_output=True,
                         text=True, timeout=timeout, cwd=cwd, env={**os.environ, "PYTHONPATH": path})
    assert "ResourceWarning" not in out.stderr and "unclosed" not in out.stderr, out.stderr[-4000:]
    return out


FITS = r"""
import sys
from helpers import TinyModel, fit
from lightning_streamprof import StreamProfiler

fit("streamprof", "healthy", max_steps=30)

class Failing(TinyModel):
    def training_step(self, batch, batch_idx):
        if batch_idx == 5:
            raise RuntimeError("the model failed")
        return super().training_step(batch, batch_idx)

profiler = StreamProfiler(dirpath="failing/traces", skip_first=1, warmup=1, active=5, every=0, max_overhead=None)
try:
    fit(profiler, "failing", max_steps=10, model=Failing())
except RuntimeError as err:
    print("raised:", err)
print("windows:", len(profiler.windows))
"""


def test_a_fit_and_a_failing_fit_leave_nothing_open(tmp_path):
    out = _dev(["-c", FITS], tmp_path)  # was: "unclosed file <_io.BufferedReader name=...>" after each fit
    assert out.returncode == 0, out.stderr[-4000:]
    assert "raised: the model failed" in out.stdout and "windows: 1" in out.stdout
    assert list((tmp_path / "healthy" / "streamprof").glob("fit-*/w*/*.pt.trace.json.gz"))


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A run of two windows, of hand-built traces."""
    root = tmp_path_factory.mktemp("resources") / "fit-1"
    for w in range(2):
        b = TraceBuilder()
        b.step(10 * w, 0, 100)
        ext = b.op("aten::mm", 5, 50)
        b.launch("gemm", 6, 10, 30, ext)
        (root / f"w{w:03d}-step{10 * w:07d}").mkdir(parents=True)
        b.write(root / f"w{w:03d}-step{10 * w:07d}" / "rank0.1.pt.trace.json.gz")
    return root


@pytest.mark.parametrize("command", ["analyze", "report", "compare"])
def test_each_command_leaves_nothing_open(tmp_path, small_run, command):
    args = {"analyze": ["analyze", str(small_run)],
            "report": ["report", str(small_run), "-o", str(tmp_path / "report.html")],
            "compare": ["compare", str(small_run), FIXTURE, "-o", str(tmp_path / "compare.html")]}[command]
    out = _dev(["-m", "lightning_streamprof.cli", *args], tmp_path)
    assert out.returncode == 0, out.stderr[-4000:]
    if command == "analyze":
        assert "aten::mm" in out.stdout
    else:
        assert open(args[-1]).read().startswith("<!DOCTYPE html>")
