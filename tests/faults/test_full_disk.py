"""A full disk never makes training fail: what the profiler held is freed (Kineto's own temporary file included),
profiling stops with one warning, the user's checkpoints are written, and no file of ours is left cut off or
empty. The tmpfs cases need root (they skip elsewhere); the simulated ones run everywhere."""

import errno
import gc
import tempfile
import warnings

import lightning as L
import pytest
from faultkit import fault_store, fill, free_bytes, held_open, leftovers, private_tmp, small_fs  # noqa: F401
from helpers import TinyModel, fit
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lightning_streamprof import StreamProfiler


def profiler(directory, **kwargs):
    kwargs = {"skip_first": 2, "warmup": 1, "active": 4, "every": 10, "max_overhead": None, **kwargs}
    return StreamProfiler(dirpath=directory, **kwargs)


def ours(caught):
    return [str(w.message) for w in caught if str(w.message).startswith("StreamProfiler")]


def test_full_temporary_directory_beside_the_checkpoints(tmp_path, small_fs, monkeypatch):
    """TMPDIR and the checkpoints share a 2 MB filesystem that Kineto's save fills (was: the checkpoint failed with
    ENOSPC, Kineto's removed ``.tmp`` still held open)."""
    disk = small_fs("disk", 2048)
    (disk / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(disk / "tmp"))
    before = free_bytes(disk)
    prof = profiler(tmp_path / "t", with_stack=True, profile_memory=True, record_shapes=True)
    checkpoints = ModelCheckpoint(dirpath=disk / "ckpt", every_n_train_steps=10, save_top_k=-1)
    gc.disable()  # the space must come back at once, not whenever the collector runs
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer = fit(prof, tmp_path, max_steps=60, callbacks=[checkpoints], enable_checkpointing=True)
    finally:
        gc.enable()
    assert trainer.global_step == 60
    assert sorted(p.name for p in (disk / "ckpt").iterdir()) == [
        f"epoch={e}-step={s}.ckpt" for e, s in [(0, 10), (0, 20), (0, 30), (1, 40), (1, 50), (1, 60)]]
    warned = ours(caught)
    assert len(warned) == 1 and "Kineto wrote" in warned[0] and "temporary directory full" in warned[0], warned
    assert held_open(disk) == [] and leftovers(disk) == []
    used_by_checkpoints = sum(p.stat().st_size for p in (disk / "ckpt").iterdir())
    assert free_bytes(disk) >= before - used_by_checkpoints - 64 * 1024  # everything the profiler took is back


def test_full_trace_store_ends_profiling(tmp_path, private_tmp, fault_store):
    """The second window meets a full store: one warning, and no window after the failure is known is recorded
    (the third may already be recording while the second's write fails in the background)."""
    fault_store.writes_allowed = 1
    fault_store.failure = OSError(errno.ENOSPC, "No space left on device")
    prof = profiler("faultmem://bucket/run")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(prof, tmp_path)
    assert trainer.global_step == 30 and [w.first_step for w in prof.windows] == [3]
    warned = ours(caught)
    assert len(warned) == 1 and "No space left on device; no further window is recorded" in warned[0], warned
    assert "3 x" not in prof.summary()  # at most the write in flight fails too
    assert [k for k in fault_store.store if ".tmp-" in k] == [] and leftovers(private_tmp) == []


class FillAtTrainEnd(Callback):
    """Fills the filesystem of ``directory`` once the windows are written, before the stage's report."""

    def __init__(self, directory):
        self.directory = directory

    def on_train_end(self, trainer, pl_module):
        trainer.profiler.windows  # every window written
        fill(self.directory)


def test_report_on_a_full_disk_is_never_left_empty(tmp_path, private_tmp, small_fs):
    traces = small_fs("traces", 4096)
    prof = profiler(traces)
    with pytest.warns(UserWarning, match="could not write the HTML report .*No space left on device"):
        trainer = fit(prof, tmp_path, callbacks=[FillAtTrainEnd(traces)])
    assert trainer.global_step == 30 and len(prof.windows) == 3
    assert list(traces.glob("*/report.html")) == []  # was a 0-byte file
    assert leftovers(traces) == []


def test_report_write_that_fails_simulated(tmp_path, private_tmp, fault_store):
    fault_store.failure = OSError(errno.ENOSPC, "No space left on device")

    class FailWritesAtTrainEnd(Callback):
        def on_train_end(self, trainer, pl_module):
            trainer.profiler.windows
            fault_store.writes_allowed = 0

    prof = profiler("faultmem://bucket/run")
    with pytest.warns(UserWarning, match="could not write the HTML report .*No space left on device"):
        fit(prof, tmp_path, callbacks=[FailWritesAtTrainEnd()])
    assert [k for k in fault_store.store if k.endswith("report.html") or ".tmp-" in k] == []
