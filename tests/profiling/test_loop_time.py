"""What a fit spends outside its training steps: validation runs, their start-ups and checkpoint saves, from
Lightning's own profiler actions, with the advice the validation loader calls for."""

from types import SimpleNamespace

import pytest
from helpers import TinyModel, fit
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import RandomDataset
from torch.utils.data import DataLoader

from lightning_streamprof import StreamProfiler
from lightning_streamprof.profiling.loop_time import LoopTime


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def play(loop, clock, events):
    """``events``: ``(seconds, "start"|"stop", action)`` in order; the clock moves to each event's time."""
    for t, kind, action in events:
        clock.now = t
        getattr(loop, kind)(action)


def validation_run(t0, first_wait, fetch, batches):
    """A validation run from ``t0``: its first batch after ``first_wait`` s, each later fetch ``fetch`` s, 10 ms of
    step per batch."""
    events = [(t0, "stop", "[LightningModule]Net.on_validation_model_zero_grad"),
              (t0, "start", "[_EvaluationLoop].val_next"), (t0 + first_wait, "stop", "[_EvaluationLoop].val_next")]
    t = t0 + first_wait + 0.010
    for _ in range(batches - 1):
        events += [(t, "start", "[_EvaluationLoop].val_next"), (t + fetch, "stop", "[_EvaluationLoop].val_next")]
        t += fetch + 0.010
    events += [(t, "stop", "[LightningModule]Net.on_validation_end"),
               (t, "stop", "[Strategy]SingleDeviceStrategy.on_validation_end")]
    return events, t


def test_hand_timed_validation_runs_and_checkpoints():
    """Training batches from 0 to 10 s; two validation runs (0.5 s and 0.3 s to their first batch, 3 more fetches
    of 2 ms each, 10 ms per batch) and a 0.25 s checkpoint between them; the fit spans 10 s."""
    clock = FakeClock()
    loop = LoopTime(clock=clock)
    play(loop, clock, [(0.0, "start", "run_training_batch"), (2.0, "stop", "run_training_batch")])
    run1, end1 = validation_run(2.0, 0.5, 0.002, 4)  # 2.0 + 0.5 + 4 x 0.010 + 3 x 0.002 = 2.546
    play(loop, clock, run1)
    play(loop, clock, [(3.0, "start", "save_checkpoint"), (3.25, "stop", "save_checkpoint")])
    run2, end2 = validation_run(5.0, 0.3, 0.002, 4)
    play(loop, clock, run2)
    play(loop, clock, [(9.9, "start", "run_training_batch"), (10.0, "stop", "run_training_batch")])
    assert loop.span == pytest.approx(10.0)
    assert loop.validation_s == pytest.approx([end1 - 2.0, end2 - 5.0]) and end1 == pytest.approx(2.546)
    assert loop.startup_s == pytest.approx([0.5, 0.3]) and loop.later_fetch_s == pytest.approx([0.002] * 6)
    restarting = SimpleNamespace(num_workers=8, persistent_workers=False)
    lines = loop.lines([restarting])
    assert lines[0] == ("Validation: 2 runs, 0.89 s (8.9% of the fit); each waited 400 ms (median) for its first "
                        "batch, against 2.0 ms for the others.")
    assert lines[1] == "Checkpoints: 1 save, 0.25 s (2.5% of the fit; 250 ms each, median)."
    # start-ups less a usual fetch: (0.5 - 0.002) + (0.3 - 0.002) = 0.796 s of 10 s
    assert lines[2] == ("The validation loader starts its 8 worker processes again at every run "
                        "(persistent_workers=False): 0.80 s (8.0% of the fit) went to start-ups; "
                        "DataLoader(..., persistent_workers=True) keeps the workers between runs.")
    kept = SimpleNamespace(num_workers=8, persistent_workers=True)
    assert [line.split(":")[0] for line in loop.lines([kept])] == ["Validation", "Checkpoints"]  # no advice


def test_no_advice_when_start_ups_are_under_one_percent_or_without_workers():
    clock = FakeClock()
    loop = LoopTime(clock=clock)
    play(loop, clock, [(0.0, "start", "run_training_batch"), (100.0, "stop", "run_training_batch")])
    run, _ = validation_run(50.0, 0.5, 0.002, 3)  # 0.5 s of a 100 s fit
    play(loop, clock, run)
    assert len(loop.lines([SimpleNamespace(num_workers=8, persistent_workers=False)])) == 1
    assert len(loop.lines([SimpleNamespace(num_workers=0, persistent_workers=False)])) == 1
    assert LoopTime().lines([]) == []  # nothing timed, nothing said


class WorkerLoaders(TinyModel):
    """``TinyModel`` whose training (4 epochs of 8 batches) or validation loader has 2 worker processes, kept
    between epochs and runs or not."""

    def __init__(self, which: str, persistent: bool):
        super().__init__()
        self.which, self.persistent = which, persistent

    def _loader(self, which: str, length: int, batch_size: int) -> DataLoader:
        workers = dict(num_workers=2, persistent_workers=self.persistent) if which == self.which else {}
        return DataLoader(RandomDataset(32, length), batch_size=batch_size, **workers)

    def train_dataloader(self):
        return self._loader("train", 16, 2) if self.which == "train" else super().train_dataloader()

    def val_dataloader(self):
        return self._loader("val", 32, 8)


@pytest.mark.parametrize("persistent", [False, True], ids=["restarting", "persistent"])
def test_a_fit_that_validates_and_checkpoints_says_what_they_took(tmp_path, persistent):
    profiler = StreamProfiler(dirpath=str(tmp_path / "prof"), skip_first=2, warmup=1, active=2, every=0)
    fit(profiler, tmp_path, max_steps=40, model=WorkerLoaders("val", persistent), val_check_interval=10,
        check_val_every_n_epoch=None, limit_val_batches=4, num_sanity_val_steps=0, enable_checkpointing=True,
        callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=20, save_top_k=-1)])
    summary = profiler.summary()
    assert "Validation: 4 runs," in summary and "for its first batch" in summary
    assert "Checkpoints: 2 saves," in summary
    # two worker processes started four times against once: the start-ups of this tiny fit are most of it
    assert ("starts its 2 worker processes again at every run" in summary) is not persistent
    report = (next((tmp_path / "prof").glob("fit-*")) / "report.html").read_text()
    assert '<p class="note">Validation: 4 runs,' in report and '<p class="note">Checkpoints: 2 saves,' in report
    assert ('<p class="note warn">The validation loader starts its 2 worker processes' in report) is not persistent


def test_hand_timed_epoch_start_ups():
    """Three epochs over 9 s; each later epoch's first batch came 0.4 s after the epoch started, the other fetches
    in 1 ms: the epochs' line, and the training loader's advice only where it restarts its workers."""
    clock = FakeClock()
    loop = LoopTime(clock=clock)
    events = []
    for epoch in range(3):
        t = 3.0 * epoch
        events.append((t, "start", "run_training_epoch"))
        first = 0.4 if epoch else 0.05  # the first epoch's iterator was made before it started
        events += [(t, "start", "[_TrainingEpochLoop].train_dataloader_next"),
                   (t + first, "stop", "[_TrainingEpochLoop].train_dataloader_next"),
                   (t + first, "start", "run_training_batch"), (t + first + 0.5, "stop", "run_training_batch")]
        u = t + first + 0.5
        for _ in range(3):
            events += [(u, "start", "[_TrainingEpochLoop].train_dataloader_next"),
                       (u + 0.001, "stop", "[_TrainingEpochLoop].train_dataloader_next"),
                       (u + 0.001, "start", "run_training_batch"), (u + 0.5, "stop", "run_training_batch")]
            u += 0.5
    play(loop, clock, events)
    assert loop.epochs == 3 and loop.epoch_startup_s == pytest.approx([0.4, 0.4])
    assert loop.span == pytest.approx(6.0 + 0.4 + 2.0 - 0.05)  # 8.35 s: the first batch's start to the last's end
    assert loop.facts() == ["Epochs: 2 after the first; each waited 400 ms (median) for its first batch, against "
                            "1.0 ms for the others."]
    restarting = SimpleNamespace(num_workers=4, persistent_workers=False)
    # (0.4 - 0.001) x 2 = 0.798 s of 8.35 s
    assert loop.advice([], [restarting]) == [
        "The training loader starts its 4 worker processes again at every epoch (persistent_workers=False): 0.80 s "
        "(9.6% of the fit) went to start-ups; DataLoader(..., persistent_workers=True) keeps the workers between "
        "epochs."]
    assert loop.advice([], [SimpleNamespace(num_workers=4, persistent_workers=True)]) == []


@pytest.mark.parametrize("persistent", [False, True], ids=["restarting", "persistent"])
def test_a_fit_of_several_epochs_says_what_their_start_ups_took(tmp_path, persistent):
    profiler = StreamProfiler(dirpath=str(tmp_path / "prof"), skip_first=2, warmup=1, active=2, every=0)
    fit(profiler, tmp_path, max_steps=32, model=WorkerLoaders("train", persistent))
    summary = profiler.summary()
    assert "Epochs: 3 after the first; each waited" in summary
    assert ("The training loader starts its 2 worker processes again at every epoch" in summary) is not persistent
