"""Training loops that validate, checkpoint, log, schedule the learning rate, clip gradients, accumulate and read
several dataloaders: pipelined training equals serial training, and every pipelined step uses its staged output."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from pipeline_models import BusyNet, TwoLoaderNet, loader
from torch import nn

from lightning_streamprof import StreamPipeline

BUSY = {
    "validation_every_4_steps": dict(val_check_interval=4, limit_val_batches=2),
    "checkpoint_every_3_steps": dict(checkpoint=3),
    "accumulate_and_clip": dict(accumulate_grad_batches=2, gradient_clip_val=0.5),
    "limit_train_and_val_batches": dict(limit_train_batches=7, limit_val_batches=1, val_check_interval=3),
    "everything": dict(val_check_interval=5, limit_val_batches=2, checkpoint=4, accumulate_grad_batches=2,
                       gradient_clip_val=1.0),
}


def fit(net, pipe, tmp_path, checkpoint=None, accelerator="cpu", **kwargs):
    callbacks = [pipe] if pipe is not None else []
    if checkpoint:
        callbacks.append(ModelCheckpoint(dirpath=tmp_path / ("piped" if pipe else "serial"),
                                         every_n_train_steps=checkpoint, save_top_k=-1))
    kwargs.setdefault("max_epochs", 2)
    trainer = L.Trainer(accelerator=accelerator, devices=1, callbacks=callbacks, logger=False,
                        enable_checkpointing=bool(checkpoint), enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, **kwargs)
    val = loader("sized") if kwargs.get("limit_val_batches") else None
    trainer.fit(net, train_dataloaders=loader("sized"), val_dataloaders=val)
    return trainer


def assert_same(piped, serial):
    assert piped.seen == serial.seen and piped.transfers == serial.transfers
    assert piped.losses == pytest.approx(serial.losses, rel=1e-6, abs=1e-7)
    for a, b in zip(piped.head.parameters(), serial.head.parameters()):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "thread"])
@pytest.mark.parametrize("case", list(BUSY))
def test_busy_loop_pipelined_equals_serial(case, threaded, tmp_path):
    serial_net, piped_net = BusyNet(), BusyNet()
    t_serial = fit(serial_net, None, tmp_path, **BUSY[case])
    pipe = StreamPipeline(mode="on", staging_thread=threaded)
    t_piped = fit(piped_net, pipe, tmp_path, **BUSY[case])
    assert_same(piped_net, serial_net)
    assert t_piped.global_step == t_serial.global_step
    assert t_piped.callback_metrics.keys() == t_serial.callback_metrics.keys()
    for key, value in t_serial.callback_metrics.items():
        torch.testing.assert_close(t_piped.callback_metrics[key], value)
    [call] = pipe.staged_calls
    assert call.hits == pipe.staged_batches - 1 > 0 and call.mismatch is None
    if BUSY[case].get("limit_val_batches"):  # validation batches staged too, every staged output used
        assert pipe.eval_staged_batches > 0 and pipe._fit.calls.proxies.eval_hits["backbone.forward"] == pipe.eval_staged_batches
        assert f"validation: {pipe.eval_staged_batches} batches staged before their step" in pipe.report()
    if BUSY[case].get("checkpoint"):
        names = sorted(p.name for p in (tmp_path / "piped").iterdir())
        assert names == sorted(p.name for p in (tmp_path / "serial").iterdir()) and names
        for name in names:
            a = torch.load(tmp_path / "piped" / name, weights_only=False)["state_dict"]
            b = torch.load(tmp_path / "serial" / name, weights_only=False)["state_dict"]
            assert a.keys() == b.keys() and all(torch.allclose(a[k].float(), b[k].float()) for k in a)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_busy_loop_on_cuda_with_the_graph_equals_serial_and_stages_validation(tmp_path):
    """Validation, checkpoints, accumulation and clipping on CUDA, the staging thread and the CUDA graph."""
    options = dict(BUSY["everything"], accelerator="gpu")
    serial_net, piped_net = BusyNet(), BusyNet()
    fit(serial_net, None, tmp_path, **options)
    pipe = StreamPipeline(mode="on")
    fit(piped_net, pipe, tmp_path, **options)
    assert_same(piped_net, serial_net)
    [call] = pipe.staged_calls
    assert call.hits == pipe.staged_batches - 1 > 0 and call.mismatch is None
    assert pipe.eval_staged_batches > 0 and pipe._fit.calls.proxies.eval_hits["backbone.forward"] == pipe.eval_staged_batches
    assert "the staged calls replay a CUDA graph" in pipe.report()


def test_two_dataloaders_at_once_stage_both_backbone_calls():
    def run(pipe):
        net = TwoLoaderNet(augment_in_hook=False)
        L.Trainer(accelerator="cpu", max_epochs=1, callbacks=[pipe] if pipe else [], logger=False,
                  enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False).fit(
            net, train_dataloaders=[loader("sized"), loader("sized", batch_size=2)])
        return net

    serial = run(None)
    pipe = StreamPipeline(mode="on")
    piped = run(pipe)
    assert_same(piped, serial)
    assert [c.label for c in pipe.staged_calls] == ["backbone.forward", "backbone.forward"]
    assert [c.hits for c in pipe.staged_calls] == [pipe.staged_batches - 1] * 2


def test_max_time_stops_a_pipelined_run_without_skipping_or_repeating_a_batch():
    net = BusyNet()
    pipe = StreamPipeline(mode="on")
    trainer = fit(net, pipe, None, max_epochs=1000, max_time={"seconds": 2})
    steps = trainer.global_step
    assert steps == len(net.seen) > 12  # more than an epoch
    serial = BusyNet()
    fit(serial, None, None, max_epochs=-1, max_steps=steps)  # serial training of as many steps
    assert net.seen == serial.seen and net.losses == pytest.approx(serial.losses, rel=1e-6, abs=1e-7)
    # a time limit cannot be foreseen: the batch staged while the last step trained is never trained
    assert serial.transfers <= net.transfers <= serial.transfers + 1
    assert pipe.staged_calls[0].hits == pipe.staged_batches - 1


def test_auto_leaves_out_the_steps_of_profiler_windows_validation_checkpoints_and_epoch_ends(tmp_path, monkeypatch):
    """``auto`` is told which steps do more than train: a StreamProfiler window and the steps that pay for it,
    validation, a checkpoint, an epoch's end (on CPU, with auto's timing enabled as the GPU has it)."""
    from lightning_streamprof import StreamProfiler
    from lightning_streamprof.pipeline.auto import AutoSwitch
    from lightning_streamprof.pipeline.stager import Stager

    monkeypatch.setattr(Stager, "overlaps", True)  # as if staging ran beside the step, as with CUDA streams
    left_out: list[int] = []
    original = AutoSwitch.exclude

    def exclude(self):
        left_out.append(trainer.global_step)
        original(self)

    monkeypatch.setattr(AutoSwitch, "exclude", exclude)
    profiler = StreamProfiler(dirpath=str(tmp_path / "prof"), skip_first=14, warmup=1, active=2, every=0,
                              analyze=False, max_overhead=None)
    pipe = StreamPipeline(warmup=2, trial=5, recheck=100)
    trainer = L.Trainer(accelerator="cpu", max_epochs=25, callbacks=[pipe, ModelCheckpoint(
        dirpath=tmp_path / "ckpt", every_n_train_steps=5, save_top_k=-1)], profiler=profiler, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, val_check_interval=4,
        limit_val_batches=1)
    trainer.fit(BusyNet(), train_dataloaders=loader("sized"), val_dataloaders=loader("sized"))
    steps = set(left_out)
    assert {4, 8, 12, 16, 20, 24} <= steps  # validation (every 4 steps); checkpoints at 5, 10, ... follow it
    assert {5, 10, 15, 20} <= steps
    assert 12 in steps  # the end of the first epoch and the second one's first fetch
    window = profiler.windows[0]  # held until auto's first choice, then warm-up 1, recorded 2, and its cost tail
    assert window.first_step > 14 and set(range(window.first_step - 1, window.last_step + 1)) <= steps
    assert pipe.rounds and pipe.rounds[0].reason == "first"  # it still decided, on the steps that only trained
    assert pipe.rounds == tuple(pipe._fit.steering.auto.history)


class ValidatesOtherwise(BusyNet):
    """``validation_step`` feeds the backbone a flipped image: no staged output matches it."""

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.head(self.backbone(x.flip(-1))), y))


def test_validation_that_uses_no_staged_output_stops_being_staged(tmp_path, caplog):
    serial, piped = ValidatesOtherwise(), ValidatesOtherwise()
    t_serial = fit(serial, None, tmp_path, val_check_interval=4, limit_val_batches=2)
    pipe = StreamPipeline(mode="on")
    t_piped = fit(piped, pipe, tmp_path, val_check_interval=4, limit_val_batches=2)
    assert_same(piped, serial)
    torch.testing.assert_close(t_piped.callback_metrics["val_loss"], t_serial.callback_metrics["val_loss"])
    assert pipe.eval_staged_batches == 2  # the first validation run only
    assert caplog.text.count("`validation_step` used none of the staged outputs") == 1


class TwoValidationLoaders(BusyNet):
    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log(f"val_loss_{dataloader_idx}", nn.functional.cross_entropy(self.head(self.backbone(x)), y),
                 add_dataloader_idx=False)


def test_several_validation_loaders_are_staged_with_their_own_hooks(tmp_path):
    def run(pipe):
        net = TwoValidationLoaders()
        trainer = L.Trainer(accelerator="cpu", max_epochs=1, callbacks=[pipe] if pipe else [], logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            num_sanity_val_steps=0, val_check_interval=6, limit_val_batches=3)
        trainer.fit(net, train_dataloaders=loader("sized"),
                    val_dataloaders=[loader("sized"), loader("sized", batch_size=2)])
        return net, trainer

    serial, t_serial = run(None)
    pipe = StreamPipeline(mode="on")
    piped, t_piped = run(pipe)
    assert_same(piped, serial)
    for key in ("val_loss_0", "val_loss_1"):
        torch.testing.assert_close(t_piped.callback_metrics[key], t_serial.callback_metrics[key])
    assert pipe.eval_staged_batches == 2 * 2 * 3  # two validation runs of two loaders, three batches each
    assert pipe._fit.calls.proxies.eval_hits["backbone.forward"] == pipe.eval_staged_batches
