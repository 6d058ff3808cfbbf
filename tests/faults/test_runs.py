"""Runs never mix: each stage gets a run directory of its own, named to the millisecond with a random suffix, so
runs started in the same second stay apart; a failed fit's windows are not counted by the next fit; traces kept in
this process's memory are not offered to commands that cannot read them."""

import os

import lightning as L
import pytest
from faultkit import private_tmp  # noqa: F401
from helpers import TinyModel, fit

from lightning_streamprof import StreamProfiler
from lightning_streamprof.api import analyze_runs
from lightning_streamprof.profiling.run_dir import make_fresh_dir, new_run_name


def profiler(directory, **kwargs):
    kwargs = {"skip_first": 2, "warmup": 1, "active": 4, "every": 10, "max_overhead": None, **kwargs}
    return StreamProfiler(dirpath=directory, **kwargs)


def test_validate_in_a_loop_gets_a_run_directory_each_time(tmp_path, private_tmp):
    """Six ``trainer.validate`` calls in a second (was one directory, steps 0, 1, 0, 1, ... reported as one run)."""
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=0, warmup=0, active=2, every=0, max_overhead=None)
    trainer = L.Trainer(accelerator="cpu", devices=1, profiler=prof, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    model = TinyModel()
    for _ in range(6):
        trainer.validate(model, verbose=False)
    runs = sorted(os.listdir(tmp_path / "t"))
    assert len(runs) == 6 and all(r.startswith("validate-") for r in runs)
    analysed = analyze_runs(tmp_path / "t")
    assert sorted(r.run for r in analysed) == runs
    assert all([s.step for s in r.merged.steps.per_step] == [0, 1] and r.merged.warnings == [] for r in analysed)


def test_run_names_are_unique_within_a_millisecond():
    names = {new_run_name("fit", now=1_700_000_000.123) for _ in range(1000)}
    assert len(names) == 1000 and all(n.startswith("fit-") and ".123-" in n for n in names)


def test_a_forked_process_names_runs_apart_from_its_parent():
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        children = pool.starmap(_names, [(200,), (200,)])
    mine = _names(200)
    assert len(set(mine) | set(children[0]) | set(children[1])) == 600


def _names(n):
    return [new_run_name("fit", now=1_700_000_000.123) for _ in range(n)]


def test_an_existing_run_directory_is_never_reused(tmp_path):
    (tmp_path / "fit-taken").mkdir()
    names = iter(["fit-taken", "fit-free"])
    assert make_fresh_dir(str(tmp_path), lambda: next(names)) == "fit-free"
    assert (tmp_path / "fit-free").is_dir()
    with pytest.raises(FileExistsError):
        make_fresh_dir(str(tmp_path), lambda: "fit-taken")


class Failing(TinyModel):
    def training_step(self, batch, batch_idx):
        if self.global_step == 14:
            raise RuntimeError("the user's bug")
        return super().training_step(batch, batch_idx)


def test_a_failed_fit_is_not_counted_by_the_next(tmp_path, private_tmp):
    prof = profiler(tmp_path / "t")
    with pytest.raises(RuntimeError, match="the user's bug"):
        fit(prof, tmp_path, model=Failing())
    assert len(prof.windows) == 2
    fit(prof, tmp_path)
    assert [w.first_step for w in prof.windows] == [3, 13, 23]
    summary = prof.summary()
    assert summary.startswith("StreamProfiler: 3 windows on rank 0"), summary.splitlines()[0]
    assert len(os.listdir(tmp_path / "t")) == 2  # each fit its own run


def test_traces_in_memory_are_not_offered_to_other_processes(tmp_path, private_tmp):
    prof = profiler("memory://streamprof-test/runs")
    fit(prof, tmp_path)
    summary = prof.summary()
    assert "streamprof analyze" not in summary and "streamprof report" not in summary
    assert "open it in a browser" not in summary
    assert "in this process's memory (memory://streamprof-test/runs/fit-" in summary
    assert "another process (the streamprof command, a browser) cannot read them" in summary
    assert "lightning_streamprof.analyze('memory://streamprof-test/runs/fit-" in summary
