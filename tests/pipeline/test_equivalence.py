import re

import lightning as L
import pytest
import torch
from pipeline_models import Net, loader

from lightning_streamprof import StreamPipeline


def run(mode, kind="sized", callback_kwargs=None, net_kwargs=None, accelerator="cpu", extra_callbacks=(),
        **trainer_kwargs):
    net = Net(**(net_kwargs or {}))
    callbacks = [] if mode is None else [StreamPipeline(mode=mode, **(callback_kwargs or {}))]
    callbacks += list(extra_callbacks)
    trainer_kwargs.setdefault("max_epochs", 2)
    trainer = L.Trainer(
        accelerator=accelerator, devices=1, callbacks=callbacks, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, **trainer_kwargs,
    )
    val = loader("sized") if trainer_kwargs.get("limit_val_batches") else None
    trainer.fit(net, train_dataloaders=loader(kind), val_dataloaders=val)
    return net, trainer


CASES = {
    "sized": dict(),
    "limit_train_batches": dict(limit_train_batches=5),
    "iterable": dict(kind="iterable"),
    "iterable_limited": dict(kind="iterable", limit_train_batches=7),
    "reload_every_epoch": dict(reload_dataloaders_every_n_epochs=1),
    "validation_interleaved": dict(val_check_interval=4, limit_val_batches=2, num_sanity_val_steps=0),
    "grad_accumulation": dict(accumulate_grad_batches=3),
    "max_steps": dict(max_steps=7, max_epochs=-1),
}


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "thread"])
@pytest.mark.parametrize("case", list(CASES))
def test_pipelined_equals_serial(case, threaded):
    kwargs = dict(CASES[case])
    serial, t_serial = run(None, **kwargs)
    piped, t_piped = run("on", callback_kwargs=dict(backbone="backbone", staging_thread=threaded), **kwargs)
    assert piped.seen == serial.seen  # same batches, same augmentation, none twice, none skipped
    assert piped.transfers == serial.transfers
    assert piped.losses == pytest.approx(serial.losses, rel=1e-6, abs=1e-7)
    for a, b in zip(piped.head.parameters(), serial.head.parameters()):
        torch.testing.assert_close(a, b)
    for a, b in zip(piped.backbone.state_dict().values(), serial.backbone.state_dict().values()):
        assert torch.equal(a, b)  # frozen features identical
    assert t_piped.global_step == t_serial.global_step
    assert t_piped.fit_loop.epoch_loop.batch_progress.is_last_batch == t_serial.fit_loop.epoch_loop.batch_progress.is_last_batch
    pipe = t_piped.callbacks[0]
    # the backbone and its input are found during the first step; every later step uses a staged output
    assert pipe.staged_batches > 0
    assert pipe.staged_calls[0].hits == pipe.staged_batches - 1
    assert "forward" not in piped.backbone.__dict__


def test_backbone_found_automatically_and_staged_outputs_used():
    net, trainer = run("on", max_epochs=1)
    pipe = trainer.callbacks[0]
    assert [c.label for c in pipe.staged_calls] == ["backbone.forward"]
    assert "staged outputs used" in pipe.report()
    hits = int(re.search(r"staged `backbone.forward` \(batch\[0\]\): (\d+) staged outputs used", pipe.report())[1])
    # found during the first step: its batch and the next were fetched before it was known
    assert hits == pipe.staged_batches - 1 > 0


def test_last_batch_flag_per_step_matches_serial():
    flags = {}
    for mode in (None, "on"):
        class Probe(L.Callback):
            def __init__(self):
                self.flags = []

            def on_train_batch_end(self, trainer, *args):
                self.flags.append(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)

        probe = Probe()
        net = Net()
        callbacks = [probe] + ([StreamPipeline(mode=mode)] if mode else [])
        for kind in ("sized", "iterable"):
            probe.flags.clear()
            L.Trainer(accelerator="cpu", max_epochs=2, callbacks=callbacks, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False).fit(Net(), loader(kind))
            flags[(mode, kind)] = list(probe.flags)
    assert flags[("on", "sized")] == flags[(None, "sized")]
    assert flags[("on", "iterable")] == flags[(None, "iterable")]
    assert flags[(None, "sized")].count(True) == 2


def test_global_rng_in_hook_changes_results_as_documented():
    serial, _ = run(None, net_kwargs=dict(use_global_rng=True), max_epochs=1)
    torch.manual_seed(0)
    piped, _ = run("on", net_kwargs=dict(use_global_rng=True), max_epochs=1)
    assert len(piped.seen) == len(serial.seen)  # same batches count, but the draws are consumed in another order


def test_trainable_backbone_is_refused():
    net = Net()
    net.backbone.requires_grad_(True)
    trainer = L.Trainer(accelerator="cpu", max_steps=1, callbacks=[StreamPipeline(backbone="backbone")], logger=False)
    with pytest.raises(ValueError, match="backbone 'backbone' has trainable parameters"):
        trainer.fit(net, loader("sized"))


def test_unknown_backbone_and_mode():
    with pytest.raises(ValueError, match="mode"):
        StreamPipeline(mode="fast")
    trainer = L.Trainer(accelerator="cpu", max_steps=1, callbacks=[StreamPipeline(backbone="nope")], logger=False)
    with pytest.raises(ValueError, match="no submodule 'nope'"):
        trainer.fit(Net(), loader("sized"))


def test_auto_on_cpu_stays_serial():
    net, trainer = run("auto", max_epochs=1)
    pipe = trainer.callbacks[0]
    assert pipe.staged_batches == 0 and not pipe.pipelined
    assert "no CUDA device" in pipe.report()


class SlotWatch(L.Callback):
    """The most batches the trainer's StreamPipeline had staged ahead at any batch end."""

    def __init__(self):
        self.most = 0

    def on_train_batch_end(self, trainer, *args):
        pipe = next(cb for cb in trainer.callbacks if isinstance(cb, StreamPipeline))
        self.most = max(self.most, len(pipe._fit.train.slots))


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "thread"])
@pytest.mark.parametrize("case", list(CASES))
def test_deeper_staging_equals_serial(case, threaded):
    """depth=3: batches N+1..N+3 staged while N trains; same results, never more than 3 ahead."""
    kwargs = dict(CASES[case])
    serial, t_serial = run(None, **kwargs)
    watch = SlotWatch()
    net, trainer = run("on", callback_kwargs=dict(backbone="backbone", depth=3, staging_thread=threaded),
                       extra_callbacks=[watch], **kwargs)
    pipe = trainer.callbacks[0]
    assert net.seen == serial.seen and net.transfers == serial.transfers
    assert net.losses == pytest.approx(serial.losses, rel=1e-6, abs=1e-7)
    assert trainer.global_step == t_serial.global_step
    assert pipe.staged_batches == len(net.seen)  # every batch came through the pipeline
    assert 1 <= watch.most <= 3
    if case == "sized":
        assert watch.most == 3 and "(up to 3 ahead)" in pipe.report()


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth"):
        StreamPipeline(depth=0)


def test_mode_off_watches_and_replaces_nothing():
    net, trainer = run("off", max_epochs=1)
    pipe = trainer.callbacks[0]
    assert pipe._fit.calls.probe is None and pipe.staged_calls == [] and pipe.staged_batches == 0
    assert pipe.rounds == ()  # no trials outside auto
    assert "forward" not in vars(net.backbone)
