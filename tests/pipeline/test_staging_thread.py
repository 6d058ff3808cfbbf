"""Staging on a background thread: hooks run there, in batch order, without touching the module state the
training thread uses."""

import threading
import time

import lightning as L
import pytest
from pipeline_models import Net, loader

from lightning_streamprof import StreamPipeline
from lightning_streamprof.pipeline.way import INLINE, SERIAL, THREAD


class SlowHookNet(Net):
    """Records the thread of each hook call and checks the training step's hook name mid-step."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_threads: list[int] = []
        self.fx_names: list[str] = []

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.hook_threads.append(threading.get_ident())
        time.sleep(0.002)
        return super().on_after_batch_transfer(batch, dataloader_idx)

    def training_step(self, batch, batch_idx):
        time.sleep(0.004)  # the next batch's hook runs meanwhile
        self.fx_names.append(self._current_fx_name)
        return super().training_step(batch, batch_idx)


def test_hooks_run_on_the_staging_thread_and_leave_the_step_alone():
    net = SlowHookNet()
    pipe = StreamPipeline(mode="on", backbone="backbone", staging_thread=True)
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, callbacks=[pipe], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(net, loader("sized"))
    main = threading.get_ident()
    assert len(net.hook_threads) == len(net.seen) == 12
    assert net.hook_threads[0] == main  # the first batch has nothing to overlap with
    assert all(t != main for t in net.hook_threads[1:])
    assert set(net.fx_names) == {"training_step"}
    assert "staging thread" in pipe.report()
    assert pipe._fit.stager.executor is None  # shut down at the end of training

    serial = SlowHookNet()
    L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False).fit(serial, loader("sized"))
    assert net.seen == serial.seen and net.losses == pytest.approx(serial.losses, rel=1e-6)


class FailingHookNet(Net):
    def on_after_batch_transfer(self, batch, dataloader_idx):
        if self.transfers == 5:
            raise RuntimeError("bad batch 5")
        return super().on_after_batch_transfer(batch, dataloader_idx)


def test_error_in_a_staged_hook_reaches_the_training_loop():
    pipe = StreamPipeline(mode="on", backbone="backbone", staging_thread=True)
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, callbacks=[pipe], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(RuntimeError, match="bad batch 5"):
        trainer.fit(FailingHookNet(), loader("sized"))
    assert pipe._fit.stager.executor is None


class Toggle(L.Callback):
    """Switches the pipeline between the staging thread and the loop's thread every few batches, as auto does."""

    def __init__(self, pipe: StreamPipeline, every: int = 3) -> None:
        self.pipe, self.every = pipe, every

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % self.every == 0:
            steering = self.pipe._fit.steering
            steering.way = INLINE if steering.way.thread else THREAD


def test_switching_between_thread_and_inline_staging_keeps_results():
    serial = Net()
    L.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False).fit(serial, loader("sized"))
    net = Net()
    pipe = StreamPipeline(mode="on", backbone="backbone", staging_thread=True)
    L.Trainer(accelerator="cpu", max_epochs=2, callbacks=[pipe, Toggle(pipe)], logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False).fit(net, loader("sized"))
    assert net.seen == serial.seen and net.transfers == serial.transfers
    assert net.losses == pytest.approx(serial.losses, rel=1e-6, abs=1e-7)


class JitterNet(Net):
    """Random short sleeps in the hook and the step (their own RNG) to shake out thread interleavings."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        import random

        self.jitter = random.Random(seed)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        time.sleep(self.jitter.random() * 0.003)
        return super().on_after_batch_transfer(batch, dataloader_idx)

    def training_step(self, batch, batch_idx):
        time.sleep(self.jitter.random() * 0.003)
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_thread_staging_equals_serial_under_random_timing(seed):
    kwargs = dict(max_epochs=2, val_check_interval=5, limit_val_batches=2, num_sanity_val_steps=0,
                  accumulate_grad_batches=2, reload_dataloaders_every_n_epochs=1)
    common = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, **kwargs)
    serial = JitterNet(seed)
    L.Trainer(**common).fit(serial, loader("sized"), loader("sized"))
    piped = JitterNet(seed)
    pipe = StreamPipeline(mode="on", backbone="backbone", staging_thread=True)
    L.Trainer(callbacks=[pipe], **common).fit(piped, loader("sized"), loader("sized"))
    assert piped.seen == serial.seen and piped.transfers == serial.transfers
    assert piped.losses == pytest.approx(serial.losses, rel=1e-6, abs=1e-7)
    assert pipe.staged_batches == len(serial.seen)


class Switcher(L.Callback):
    """Cycles the pipeline through serial, inline and thread staging every few batches, as auto's trials do."""

    def __init__(self, pipe: StreamPipeline, every: int = 2) -> None:
        self.pipe, self.every, self.turn = pipe, every, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % self.every == 0:
            self.turn += 1
            way = ("serial", "inline", "thread")[self.turn % 3]
            self.pipe._fit.steering.way = {"serial": SERIAL, "inline": INLINE, "thread": THREAD}[way]


@pytest.mark.parametrize("depth", [1, 3])
def test_switching_serial_inline_thread_with_a_queue_keeps_results(depth):
    """Staged batches are delivered in order when pipelining stops (the queue drains before serial fetches)."""
    kwargs = dict(max_epochs=2, val_check_interval=5, limit_val_batches=2, num_sanity_val_steps=0)
    common = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, **kwargs)
    serial = Net()
    L.Trainer(**common).fit(serial, loader("sized"), loader("sized"))
    net = Net()
    pipe = StreamPipeline(mode="on", backbone="backbone", staging_thread=True, depth=depth)
    L.Trainer(callbacks=[pipe, Switcher(pipe)], **common).fit(net, loader("sized"), loader("sized"))
    assert net.seen == serial.seen and net.transfers == serial.transfers
    assert net.losses == pytest.approx(serial.losses, rel=1e-6, abs=1e-7)
    assert pipe.staged_batches > 0 and pipe.serial_batches > 0
