"""The exporter's bounded waits: pending windows are abandoned after the time-out without leaving their temporary
files, and nothing blocks when the profiler is freed."""

import gzip
import json
import os
import sys
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
    before = set(threading.enumerate())
    exp = TraceExporter(analyze=False, timeout=30)
    _submit(exp, private_tmp, tmp_path, 3)
    start = time.perf_counter()
    assert exp.finish(0.3) is False and time.perf_counter() - start < 2
    assert leftovers(private_tmp) == []
    assert exp.problems.drain() == ["3 windows not written within 0.3 s; abandoned"]
    gate.set()
    assert exp.wait(5)
    exp.close(1)
    # the write that was under way when its window was abandoned ends on its own thread: no temporary file after it.
    # Its end is its threads' end (a poll for "no temporary file" can look before the released write made its own);
    # on a shared machine a write may stall for seconds, and the exporter's own deadline for one is its 30 s timeout
    for thread in set(threading.enumerate()) - before:
        if thread.name.startswith("streamprof-"):
            thread.join(30)
    assert leftovers(private_tmp, tmp_path) == [], _streamprof_threads()


def _streamprof_threads():
    """Where the exporter's threads are (for a failure's message)."""
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(f"{names.get(ident)}:\n{''.join(traceback.format_stack(frame)[-6:])}"
                     for ident, frame in sys._current_frames().items() if "streamprof" in str(names.get(ident)))


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


FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "traces",
                       "frozen_backbone.pt.trace.json.gz")


def _device_trace(directory):
    local = directory / "streamprof-device.pt.trace.json"
    local.write_bytes(gzip.decompress(open(FIXTURE, "rb").read()))
    return str(local)


def test_a_device_trace_is_gzipped_by_the_worker_not_here(tmp_path, private_tmp, monkeypatch):
    """The worker returns the trace gzipped with its counter track: the training process's threads do not compress
    it (here they cannot)."""
    monkeypatch.setattr(exporter_module, "gzipped_trace",
                        lambda *a, **k: pytest.fail("gzipped in the training process"))
    exp = TraceExporter(timeout=60)
    target = tmp_path / "out" / "w0.pt.trace.json.gz"
    exp.submit(_device_trace(private_tmp), TraceIdentity(path=str(target), window=0), steps=(0, 1), device_work=True)
    assert exp.wait(120)
    exp.close(10)
    events = json.loads(gzip.decompress(target.read_bytes()))["traceEvents"]
    assert any(e.get("ph") == "C" for e in events)
    assert exp.results[0].analysis is not None and exp.problems.drain() == []
    assert leftovers(private_tmp, tmp_path) == []


@pytest.mark.parametrize("behaviour, reason", [
    ("exit", "analysis worker exited"),
    ("hang", "did not answer within"),
    ("garbage", "answer is not a result"),
    ("short", "analysis worker exited"),
])
def test_a_device_trace_is_written_when_the_worker_fails(tmp_path, private_tmp, monkeypatch, behaviour, reason):
    """A worker that exits, hangs, answers nonsense or sends less of the trace than it said: the trace is gzipped
    here, without the counter track, and written; one problem names the window and why."""
    from lightning_streamprof.profiling import worker

    code = {
        "exit": "import os, sys; sys.stdin.readline(); os._exit(3)",
        "hang": "import sys, time; sys.stdin.readline(); time.sleep(60)",
        "garbage": "import sys\nfor line in sys.stdin: print('{\"ok\": 5}', flush=True)",
        "short": "import sys; sys.stdin.readline(); sys.stdout.write('{\"error\": \"x\", \"gz\": 100}\\nabc'); "
                 "sys.stdout.flush()",
    }[behaviour]
    monkeypatch.setattr(worker.AnalysisWorker, "argv", (sys.executable, "-c", code))
    real_init = worker.AnalysisWorker.__init__
    monkeypatch.setattr(worker.AnalysisWorker, "__init__", lambda self, timeout=2.0: real_init(self, timeout))
    exp = TraceExporter(timeout=60)
    target = tmp_path / "out" / "w0.pt.trace.json.gz"
    exp.submit(_device_trace(private_tmp), TraceIdentity(path=str(target), window=0), steps=(0, 1), device_work=True)
    assert exp.wait(60)
    exp.close(10)
    events = json.loads(gzip.decompress(target.read_bytes()))["traceEvents"]
    assert events and not any(e.get("ph") == "C" for e in events)
    assert exp.written == 1 and exp.results[0].analysis is None
    (problem,) = exp.problems.drain()
    assert problem.startswith("could not analyse window 0: ") and reason in problem
    assert leftovers(private_tmp, tmp_path) == []


class _Unsaved:
    """A stopped trace as the recorder hands it over: an export thread saves it (once) before anything else."""

    def __init__(self, directory, i, fail=False, gate=None):
        self.local = str(directory / f"streamprof-{i}.pt.trace.json")
        open(self.local, "w").close()
        self.fail, self.gate, self.saves, self.discarded = fail, gate, [], False
        self.done = threading.Event()

    def save(self):
        self.saves.append(threading.current_thread().name)
        if self.gate is not None:
            self.gate.wait()
        if self.fail:
            os.remove(self.local)
            raise RuntimeError("Kineto wrote nothing")
        with open(self.local, "w") as f:
            f.write('{"traceEvents": []}')
        self.done.set()

    def discard(self):
        self.discarded = True
        os.remove(self.local)


@pytest.mark.parametrize("analyze", [False, True])
def test_a_stopped_trace_is_saved_once_by_an_export_thread_then_written(tmp_path, private_tmp, analyze):
    exp = TraceExporter(analyze=analyze, timeout=30)
    saving = threading.Event()
    traces = [_Unsaved(private_tmp, 0, gate=saving), _Unsaved(private_tmp, 1, fail=True)]
    for i, trace in enumerate(traces):
        exp.submit(trace, TraceIdentity(path=str(tmp_path / f"w{i}.pt.trace.json.gz"), window=i), steps=(i, i + 1))
    assert exp.wait_saved(0.2) is False  # the first save is held at its gate
    saving.set()
    assert exp.wait_saved(10) and exp.wait(30)
    assert [t.saves for t in traces] == [["streamprof-save"], ["streamprof-save"]]
    assert [r.window for r in exp.results] == [0]
    with gzip.open(tmp_path / "w0.pt.trace.json.gz") as f:
        assert json.load(f) == {"traceEvents": []}
    problems = [p for p in exp.problems.drain() if not p.startswith("could not analyse window 0")]  # no events
    assert problems == ["window 1 not written: RuntimeError: Kineto wrote nothing"]
    exp.close(5)
    assert leftovers(private_tmp) == []


def test_stopped_traces_left_unsaved_are_discarded(tmp_path, private_tmp):
    exp = TraceExporter(analyze=False, timeout=30)
    exp.skip(skipped := _Unsaved(private_tmp, 0))  # a multi-rank run's window that the store cannot take
    held = threading.Event()
    saving = _Unsaved(private_tmp, 1, gate=held)  # Kineto's writer still at work when the stage ends
    waiting = _Unsaved(private_tmp, 2)  # queued behind it
    for i, trace in ((1, saving), (2, waiting)):
        exp.submit(trace, TraceIdentity(path=str(tmp_path / f"w{i}.pt.trace.json.gz"), window=i), steps=(i, i + 1))
    assert exp.finish(0.3) is False
    assert skipped.discarded and waiting.discarded and waiting.saves == [] and not saving.discarded
    held.set()  # the save that was running ends; its file is removed
    exp.close(5)
    assert saving.done.wait(5)
    deadline = time.perf_counter() + 5
    while leftovers(private_tmp) and time.perf_counter() < deadline:  # removed right after the writer returns
        time.sleep(0.01)
    assert leftovers(private_tmp) == [] and list(tmp_path.glob("w*.gz")) == []


def test_a_save_never_waits_behind_a_slow_store(tmp_path, private_tmp, gate):
    """The next window and a checkpoint wait for the last trace's save: that wait must not include a store that
    hangs (the writes are held at the gate here) or an analysis."""
    exp = TraceExporter(analyze=True, timeout=30)
    exp.submit(_local(private_tmp, 0), TraceIdentity(path=str(tmp_path / "w0.pt.trace.json.gz"), window=0),
               steps=(0, 1))
    later = _Unsaved(private_tmp, 1)
    exp.submit(later, TraceIdentity(path=str(tmp_path / "w1.pt.trace.json.gz"), window=1), steps=(1, 2))
    start = time.perf_counter()
    assert exp.wait_saved(5) and time.perf_counter() - start < 2
    assert later.saves == ["streamprof-save"] and not exp.wait(0.2)  # saved, not written yet
    gate.set()
    assert exp.wait(30)
    exp.close(5)
    assert leftovers(private_tmp) == []


EXIT_DURING_WRITE = r"""
import sys, threading
from lightning_streamprof import output

started = threading.Event()


def stuck(fd, data):
    import os
    os.write(fd, data[:10])
    started.set()
    threading.Event().wait()  # the write never ends: the program exits under it


output._write_all = stuck
threading.Thread(target=output.write_atomic, args=(sys.argv[1], b"x" * 100), daemon=True).start()
assert started.wait(30)
print("exiting", flush=True)
"""


def test_only_local_writes_are_left_for_the_exit_to_clean_up(tmp_path, monkeypatch):
    """A remote store's temporary object appears only when its upload completes: the exit has nothing to remove
    there, and must not reach for a store that may be gone."""
    import fsspec

    from lightning_streamprof import output

    seen = []
    real_open, real_write = fsspec.AbstractFileSystem.open, output._write_all

    def spy_open(self, path, *args, **kwargs):
        seen.append(("remote", sorted(tmp for _, tmp in output._in_flight)))
        return real_open(self, path, *args, **kwargs)

    def spy_write(fd, data):
        seen.append(("local", sorted(tmp for _, tmp in output._in_flight)))
        real_write(fd, data)

    monkeypatch.setattr(fsspec.AbstractFileSystem, "open", spy_open)
    monkeypatch.setattr(output, "_write_all", spy_write)
    output.write_atomic(str(tmp_path / "a.gz"), b"x")
    output.write_atomic("memory://streamprof-test/a.gz", b"x")
    (local, local_pending), (remote, remote_pending) = seen
    assert local == "local" and len(local_pending) == 1 and ".tmp-" in local_pending[0]
    assert remote == "remote" and remote_pending == []
    assert output._in_flight == set() and (tmp_path / "a.gz").read_bytes() == b"x"


def test_a_write_under_way_at_exit_leaves_no_temporary_file(tmp_path):
    import subprocess

    target = tmp_path / "w0.pt.trace.json.gz"
    out = subprocess.run([sys.executable, "-c", EXIT_DURING_WRITE, str(target)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "exiting" in out.stdout, out.stderr
    assert leftovers(tmp_path) == [] and not target.exists()
