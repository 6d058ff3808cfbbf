import os
import warnings

import fsspec
import pytest
import torch
from traces_on_disk import TB_PATTERN, load_trace, step_numbers, trace_files
from helpers import Paced, fit

from lightning_streamprof import StreamProfiler
from lightning_streamprof.profiling.schedule import WindowSchedule


def test_sampled_windows_written_per_schedule(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "traces", skip_first=4, warmup=1, active=2, every=10, max_overhead=None)
    trainer = fit(prof, tmp_path, max_steps=40, callbacks=[Paced()])
    assert trainer.global_step == 40
    files = trace_files(tmp_path / "traces")
    expected = WindowSchedule(skip_first=4, warmup=1, active=2, every=10).windows_until(40)
    assert len(files) == len(expected) == 4
    for path, window in zip(files, expected):
        name = os.path.basename(path)
        match = TB_PATTERN.match(name)
        assert match and match.group(1) == "rank0" and match.group(2), name
        assert os.path.basename(os.path.dirname(path)) == f"w{window.index:03d}-step{window.start:07d}"
        trace = load_trace(path)  # valid gzip JSON
        assert step_numbers(trace) == list(range(window.start, window.stop))
        info = trace["distributedInfo"]
        assert (info["rank"], info["world_size"]) == (0, 1)
        names = {e["name"] for e in trace["traceEvents"]}
        assert "[pl][profile]run_training_batch" in names
        assert "[pl][profile][_TrainingEpochLoop].train_dataloader_next" in names
    assert not [f for f in os.listdir(os.path.dirname(files[0])) if ".tmp-" in f]
    assert [w.first_step for w in prof.windows] == [w.start for w in expected]


def test_one_window_mode_and_default_dir(tmp_path):
    prof = StreamProfiler(skip_first=2, warmup=1, active=3, every=0)
    fit(prof, tmp_path, max_steps=30)
    files = trace_files(tmp_path)
    assert len(files) == 1
    assert f"{os.sep}streamprof{os.sep}fit-" in files[0]  # under the trainer's log dir
    assert step_numbers(load_trace(files[0])) == [3, 4, 5]


def test_step_numbers_with_interleaved_validation(tmp_path):
    # validation after every 5 training batches; windows straddle it
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=4, every=8, max_overhead=None)
    fit(prof, tmp_path, max_steps=32, val_check_interval=5, limit_val_batches=2, num_sanity_val_steps=0)
    for path, window in zip(trace_files(tmp_path / "t"), prof.windows):
        trace = load_trace(path)
        steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
        assert step_numbers(trace) == list(range(window.first_step, window.last_step + 1))
        val = [e for e in trace["traceEvents"] if "validation_step" in e.get("name", "")]
        for v in val:  # validation never falls inside a training step
            assert not any(s["ts"] <= v["ts"] < s["ts"] + s["dur"] for s in steps)
    assert [w.first_step for w in prof.windows] == [3, 11, 19, 27]


def test_partial_window_at_end_is_exported(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=5, warmup=1, active=10, every=0)
    fit(prof, tmp_path, max_steps=10)
    (path,) = trace_files(tmp_path / "t")
    assert step_numbers(load_trace(path)) == [6, 7, 8, 9]


def test_fsspec_memory_dirpath(tmp_path):
    prof = StreamProfiler(dirpath="memory://streamprof-test/run", skip_first=2, warmup=1, active=2, every=10)
    fit(prof, tmp_path, max_steps=25)
    fs = fsspec.filesystem("memory")
    files = [p for p in fs.find("/streamprof-test/run") if p.endswith(".pt.trace.json.gz")]
    assert len(files) == len(prof.windows) >= 1
    assert all(w.path.startswith("memory://streamprof-test/run/fit-") for w in prof.windows)


def test_unwritable_dirpath_warns_and_training_finishes(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    prof = StreamProfiler(dirpath=blocker / "traces", skip_first=2, warmup=1, active=2, every=6)
    with pytest.warns(UserWarning, match="StreamProfiler: (cannot write|could not write)"):
        trainer = fit(prof, tmp_path, max_steps=20)
    assert trainer.global_step == 20
    assert prof.windows == []


def test_profiling_error_is_a_warning(tmp_path, monkeypatch):
    real_stop = torch.profiler.profile.stop_trace

    def broken(self):
        real_stop(self)  # Kineto stops (the next tests need it free), then the error
        raise RuntimeError("kineto exploded")

    monkeypatch.setattr(torch.profiler.profile, "stop_trace", broken)
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=2, every=5)
    with pytest.warns(UserWarning, match="profiling stopped after an error.*kineto exploded"):
        trainer = fit(prof, tmp_path, max_steps=20)
    assert trainer.global_step == 20
    assert trace_files(tmp_path / "t") == []


def test_an_error_of_kinetos_writer_is_a_warning_and_later_windows_are_written(tmp_path, monkeypatch):
    """The trace is saved on an export thread: a failed save is that window's problem alone."""
    from lightning_streamprof.profiling import session

    real, calls = session._write_results, []

    def first_fails(results, path):
        calls.append(path)
        if len(calls) == 1:
            raise RuntimeError("kineto exploded")
        real(results, path)

    monkeypatch.setattr(session, "_write_results", first_fails)
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=2, every=5, max_overhead=None)
    with pytest.warns(UserWarning, match="window 0 not written: .*kineto exploded"):
        trainer = fit(prof, tmp_path, max_steps=20)
    assert trainer.global_step == 20
    assert [w.window for w in prof.windows] == [1, 2, 3] and len(trace_files(tmp_path / "t")) == 3


def test_summary_is_a_short_table_per_window(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=2, every=10, row_limit=5, max_overhead=None)
    fit(prof, tmp_path, max_steps=30)
    text = prof.summary()
    assert sum(line.startswith("window ") for line in text.splitlines()) == len(prof.windows) >= 2
    assert "operator" in text and "aten::" in text
    assert len(text.splitlines()) < 20 * len(prof.windows)


def test_overhead_budget_spaces_windows(tmp_path):
    # a budget this small leaves room for the first window only, in a short run
    tight = StreamProfiler(dirpath=tmp_path / "a", skip_first=2, warmup=1, active=2, every=6, max_overhead=1e-4)
    fit(tight, tmp_path, max_steps=60)
    free = StreamProfiler(dirpath=tmp_path / "b", skip_first=2, warmup=1, active=2, every=6, max_overhead=None)
    fit(free, tmp_path, max_steps=60, callbacks=[Paced()])
    assert len(tight.windows) == 1
    assert len(free.windows) == len(WindowSchedule(2, 1, 2, 6).windows_until(60))
    assert tight.overhead_seconds > 0


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="max_overhead"):
        StreamProfiler(every=None, max_overhead=None)
    with pytest.raises(ValueError, match="max_overhead"):
        StreamProfiler(max_overhead=2.0)
    with pytest.raises(ValueError, match="active"):
        StreamProfiler(active=0)


def test_staging_callbacks_are_found_by_what_they_offer_not_by_name():
    from lightning_streamprof import StreamPipeline
    from lightning_streamprof.profiling.window_sessions import StagingCallback

    class Reporting:
        stages_on_thread = True

        def report(self):
            return "staged"

    assert isinstance(Reporting(), StagingCallback)
    assert isinstance(StreamPipeline(), StagingCallback)
    assert not isinstance(object(), StagingCallback)
