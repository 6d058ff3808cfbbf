"""Faults during training: the run (or the user's own exception) goes on as without the profiler, the process
exits normally, no window is lost or half-written, and no temporary file is left behind."""

import gc
import json
import os
import subprocess
import sys
import time
import warnings

import pytest
from traces_on_disk import load_trace, step_numbers, trace_files
from faultkit import fault_store, fill, leftovers, private_tmp, remount_read_only, small_fs  # noqa: F401
from helpers import TinyModel, fit

from lightning_streamprof import StreamProfiler

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_program.py")
FAIL_AT = 14  # fault_program.py fails inside the window recording steps 13..16


def profiler(directory, **kwargs):
    kwargs = {"skip_first": 2, "warmup": 1, "active": 4, "every": 10, "max_overhead": None, **kwargs}
    return StreamProfiler(dirpath=directory, **kwargs)


class Failing(TinyModel):
    def training_step(self, batch, batch_idx):
        if self.global_step == FAIL_AT:
            raise RuntimeError("the user's bug")
        return super().training_step(batch, batch_idx)


def run_program(mode, directory, tmp):
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, PROGRAM, mode, str(directory)], capture_output=True, text=True,
                          timeout=120, env=env)


def assert_cut_short_window_written(directory):
    """Window 0 whole, window 1 (steps 13..16) cut short at the failing step, both complete gzip JSON."""
    files = trace_files(directory)
    assert [step_numbers(load_trace(f)) for f in files] == [[3, 4, 5, 6], [13, 14]]


def test_exception_in_a_window_writes_it_and_freeing_does_not_hang(tmp_path, private_tmp):
    prof = profiler(tmp_path / "t")
    with pytest.raises(RuntimeError, match="the user's bug"):
        fit(prof, tmp_path, model=Failing())
    assert [(w.first_step, w.last_step) for w in prof.windows] == [(3, 6), (13, 14)]
    assert_cut_short_window_written(tmp_path / "t")
    start = time.perf_counter()
    del prof
    gc.collect()
    assert time.perf_counter() - start < 2
    assert leftovers(private_tmp, tmp_path / "t") == []


def test_exception_then_freeing_in_a_process_of_its_own(tmp_path):
    (tmp_path / "tmp").mkdir()
    out = run_program("del", tmp_path / "t", tmp_path / "tmp")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["raised"] == "RuntimeError(\"the user's bug\")" and result["free_s"] < 2
    assert_cut_short_window_written(tmp_path / "t")
    assert leftovers(tmp_path / "tmp", tmp_path / "t") == []


def test_keyboard_interrupt_in_a_window_exits_as_without_the_profiler(tmp_path):
    (tmp_path / "tmp").mkdir()
    plain = run_program("interrupt", "none", tmp_path / "tmp")
    profiled = run_program("interrupt", tmp_path / "t", tmp_path / "tmp")
    assert plain.returncode == profiled.returncode == 1  # Lightning's exit status after Ctrl+C
    assert "cannot schedule" not in profiled.stderr and "Traceback" not in profiled.stderr
    assert_cut_short_window_written(tmp_path / "t")
    assert leftovers(tmp_path / "tmp", tmp_path / "t") == []


def test_second_fit_after_a_failed_one_exits_cleanly(tmp_path):
    (tmp_path / "tmp").mkdir()
    out = run_program("second", tmp_path / "t", tmp_path / "tmp")
    assert out.returncode == 0, out.stderr[-2000:]  # was a segmentation fault at exit
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["second_steps"] == 30 and result["second_windows"] == 3
    assert "disableProfiler" not in out.stderr
    assert leftovers(tmp_path / "tmp", tmp_path / "t") == []


def _windows_listed_are_whole(prof):
    for w in prof.windows:
        if not os.path.exists(w.path):  # removed by the test
            continue
        assert step_numbers(load_trace(w.path)) == list(range(w.first_step, w.last_step + 1))


def test_trace_directory_that_cannot_be_created(tmp_path, private_tmp):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    prof = profiler(blocker / "traces")
    with pytest.warns(UserWarning, match="cannot write traces to .*no window is recorded"):
        trainer = fit(prof, tmp_path)
    assert trainer.global_step == 30 and prof.windows == []
    assert leftovers(private_tmp) == []


class AfterFirstWindow(TinyModel):
    """Runs ``action`` at step 9 (after the first window's export)."""

    def __init__(self, action):
        super().__init__()
        self.action = action

    def training_step(self, batch, batch_idx):
        if self.global_step == 9:
            self.trainer.profiler.windows  # the first window is written
            self.action()
        return super().training_step(batch, batch_idx)


def test_trace_directory_turned_read_only_mid_run(tmp_path, private_tmp, small_fs):
    traces = small_fs("traces", 4096)
    prof = profiler(traces)
    with pytest.warns(UserWarning, match="could not write .*Read-only file system"):
        trainer = fit(prof, tmp_path, model=AfterFirstWindow(lambda: remount_read_only(traces)))
    assert trainer.global_step == 30
    assert [w.first_step for w in prof.windows] == [3]
    _windows_listed_are_whole(prof)
    assert leftovers(private_tmp, traces) == []


def test_trace_directory_removed_mid_run(tmp_path, private_tmp):
    import shutil

    prof = profiler(tmp_path / "t")
    trainer = fit(prof, tmp_path, model=AfterFirstWindow(lambda: shutil.rmtree(tmp_path / "t")))
    assert trainer.global_step == 30
    assert [w.first_step for w in prof.windows] == [3, 13, 23]  # made again for the next window
    assert [os.path.exists(w.path) for w in prof.windows] == [False, True, True]
    _windows_listed_are_whole(prof)
    assert leftovers(private_tmp, tmp_path / "t") == []


def test_full_trace_directory(tmp_path, private_tmp, small_fs):
    traces = small_fs("traces", 64)
    fill(traces)
    prof = profiler(traces)
    with pytest.warns(UserWarning, match="No space left on device"):
        trainer = fit(prof, tmp_path)
    assert trainer.global_step == 30 and prof.windows == []
    assert leftovers(private_tmp, traces) == []  # no zero-byte .tmp- file


def test_full_store_simulated(tmp_path, private_tmp, fault_store):
    import errno

    fault_store.writes_allowed = 1
    fault_store.failure = OSError(errno.ENOSPC, "No space left on device")
    prof = profiler("faultmem://bucket/run")
    with pytest.warns(UserWarning, match="No space left on device"):
        trainer = fit(prof, tmp_path)
    assert trainer.global_step == 30 and [w.first_step for w in prof.windows] == [3]
    assert [k for k in fault_store.store if ".tmp-" in k] == []
    assert leftovers(private_tmp) == []


def test_full_temporary_directory(tmp_path, small_fs, monkeypatch):
    import tempfile

    tmp = small_fs("tmp", 64)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    fill(tmp)
    prof = profiler(tmp_path / "t")
    with pytest.warns(UserWarning, match="Kineto wrote (an empty|a cut-off) trace .*temporary directory full"):
        trainer = fit(prof, tmp_path)
    assert trainer.global_step == 30 and prof.windows == [] and trace_files(tmp_path / "t") == []
    assert leftovers(tmp) == []


def test_empty_export_simulated(tmp_path, private_tmp, monkeypatch):
    from lightning_streamprof.profiling import session

    monkeypatch.setattr(session, "_write_results", lambda results, path: None)
    prof = profiler(tmp_path / "t")
    with pytest.warns(UserWarning, match="Kineto wrote an empty trace"):
        trainer = fit(prof, tmp_path)
    assert trainer.global_step == 30 and prof.windows == [] and trace_files(tmp_path / "t") == []
    assert leftovers(private_tmp) == []


def test_store_that_stops_answering(tmp_path, private_tmp, fault_store):
    fault_store.writes_allowed = 1  # the first window is written, then every request hangs
    prof = profiler("faultmem://bucket/run", timeout=1.0, analyze=False)
    start = time.perf_counter()
    with pytest.warns(UserWarning, match="did not answer within 1 s"):
        trainer = fit(prof, tmp_path, max_steps=60)
    assert trainer.global_step == 60
    assert time.perf_counter() - start < 30  # bounded: no window waits on the store for more than 1 s
    assert [w.first_step for w in prof.windows] == [3]
    assert "skipped" in prof.summary()  # no further windows once the store is gone
    assert leftovers(private_tmp) == []


def test_store_that_does_not_answer_at_setup(tmp_path, private_tmp, fault_store):
    fault_store.writes_allowed = 0
    fault_store.failure = None

    class Slow(fault_store):
        def makedirs(self, path, exist_ok=False):
            type(self).gate.wait()

    from fsspec.registry import register_implementation

    register_implementation("faultmem", Slow, clobber=True)
    prof = profiler("faultmem://bucket/run", timeout=0.5)
    with pytest.warns(UserWarning, match="did not answer within 0.5 s.*no window is recorded"):
        trainer = fit(prof, tmp_path)
    assert trainer.global_step == 30 and prof.windows == []


@pytest.mark.parametrize("behaviour, reason", [
    ("raise", "analysis failed on purpose"),
    ("exit", "analysis worker exited"),
    ("hang", "did not answer within"),
    ("garbage", "answer is not a result"),
])
def test_analysis_that_fails(tmp_path, private_tmp, monkeypatch, behaviour, reason):
    from lightning_streamprof.profiling import worker

    code = {
        "raise": "import lightning_streamprof.profiling.worker as w\n"
                 "def boom(*a): raise RuntimeError('analysis failed on purpose')\n"
                 "w.analyze_local = boom\nw._serve()",
        "exit": "import os, sys; sys.stdin.readline(); os._exit(3)",
        "hang": "import sys, time; sys.stdin.readline(); time.sleep(60)",
        "garbage": "import sys\nfor line in sys.stdin: print('{\"ok\": 5}', flush=True)",
    }[behaviour]
    monkeypatch.setattr(worker.AnalysisWorker, "argv", (sys.executable, "-c", code))
    real_init = worker.AnalysisWorker.__init__
    monkeypatch.setattr(worker.AnalysisWorker, "__init__", lambda self, timeout=2.0: real_init(self, timeout))
    prof = profiler(tmp_path / "t")
    with pytest.warns(UserWarning, match=f"could not analyse window 0: .*{reason}"):
        trainer = fit(prof, tmp_path)
    assert trainer.global_step == 30
    assert [w.first_step for w in prof.windows] == [3, 13, 23]
    assert all(w.analysis is None for w in prof.windows)
    _windows_listed_are_whole(prof)
    assert "not analysed" in prof.summary()
    assert leftovers(private_tmp, tmp_path / "t") == []


def test_no_warning_in_a_healthy_run(tmp_path, private_tmp):
    prof = profiler(tmp_path / "t")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="StreamProfiler")
        fit(prof, tmp_path)
    assert len(prof.windows) == 3 and all(w.metrics for w in prof.windows)
    assert leftovers(private_tmp, tmp_path / "t") == []
