"""A backbone whose input ``training_step`` makes from the batch (conversion, scaling, normalisation): found on
the first step, staged, checked, and never silent when it cannot be staged."""

import lightning as L
import pytest
import torch
from pipeline_models import Net, loader
from torch import nn

from lightning_streamprof import StreamPipeline


class StepConverts(Net):
    """The batch stays uint8 through the hooks; ``training_step`` makes the backbone's input as ``how`` says."""

    def __init__(self, how: str) -> None:
        super().__init__(augment_in_hook=False)
        self.how = how
        self.register_buffer("mean", torch.tensor([0.4, 0.5, 0.6]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1))
        self.scale = 1.0

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.transfers += 1
        return batch

    def backbone_input(self, x: torch.Tensor) -> torch.Tensor:
        how = self.how
        if how == "float":  # the article's code
            return x.float()
        if how == "normalize":
            return (x.float() / 255 - self.mean) / self.std
        if how == "constants_made_in_step":  # mean and std from Python lists in every step (timm users do)
            mean = torch.tensor([0.4, 0.5, 0.6], device=x.device).view(1, 3, 1, 1)
            std = torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1).to(x.device)
            return (x.float() / 255 - mean) / std
        if how == "in_place":  # in place on the batch tensor itself, then torchvision-style sub_/div_
            x = x.float()
            x.div_(255)
            return x.clone().sub_(self.mean).div_(self.std).contiguous()
        if how == "noise":  # a random draw: replaying it would change the step's random numbers
            return x.float() + torch.randn_like(x, dtype=torch.float32)
        if how == "changing_scale":  # a "constant" that is not one: the first steps' check catches it
            self.scale += 1.0
            return x.float() * self.scale
        if how == "zeros":
            return torch.zeros(x.shape, device=x.device)
        raise ValueError(how)

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(int(x.sum().item()))
        with torch.no_grad():
            features = self.backbone(self.backbone_input(x))
        loss = nn.functional.cross_entropy(self.head(features), y)
        self.losses.append(loss.item())
        return loss


def fit(net, pipeline_kwargs, accelerator="cpu", precision="32-true", max_epochs=2):
    callbacks = [StreamPipeline(**pipeline_kwargs)] if pipeline_kwargs is not None else []
    trainer = L.Trainer(accelerator=accelerator, devices=1, max_epochs=max_epochs, callbacks=callbacks, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        precision=precision)
    trainer.fit(net, loader("sized"))
    return net, (callbacks[0] if callbacks else None)


def assert_same_training(piped, serial):
    assert piped.seen == serial.seen and piped.transfers == serial.transfers
    assert piped.losses == pytest.approx(serial.losses, rel=1e-6, abs=1e-7)
    for a, b in zip(piped.head.parameters(), serial.head.parameters()):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("how", ["float", "normalize", "in_place", "constants_made_in_step"])
@pytest.mark.parametrize("backbone", [None, "backbone"], ids=["found", "named"])
def test_a_derived_input_is_staged_and_results_equal_serial(how, backbone):
    serial, _ = fit(StepConverts(how), None)
    piped, pipe = fit(StepConverts(how), dict(mode="on", backbone=backbone))
    assert_same_training(piped, serial)
    [call] = pipe.staged_calls
    assert call.label == "backbone.forward" and [a.kind for a in call.args] == ["equal"]
    assert call.hits == pipe.staged_batches - 1 > 0  # every step after the first, where the input is found
    assert call.mismatch is None and call.verify_left == 0
    assert "staged `backbone.forward` (batch[0].float" in pipe.report()


def test_the_article_workload_with_no_arguments_on_cpu_under_bf16():
    serial, _ = fit(StepConverts("normalize"), None, precision="bf16-mixed")
    piped, pipe = fit(StepConverts("normalize"), dict(mode="on"), precision="bf16-mixed")
    assert_same_training(piped, serial)
    assert pipe.staged_calls[0].hits == pipe.staged_batches - 1


def test_a_derivation_that_cannot_be_staged_is_named_with_the_fix():
    torch.manual_seed(5)
    serial, _ = fit(StepConverts("noise"), None)
    torch.manual_seed(5)
    with pytest.warns(UserWarning) as record:
        piped, pipe = fit(StepConverts("noise"), dict(mode="on", backbone="backbone"))
    messages = [str(w.message) for w in record if "StreamPipeline" in str(w.message)]
    assert len(messages) == 1, messages
    assert messages[0] == (
        "StreamPipeline: `backbone.forward` is called with argument 0 (float32 [4, 3, 8, 8], made from the batch's"
        " uint8 [4, 3, 8, 8] tensor), which `training_step` makes by an operation that cannot be replayed:"
        " `randn_like`; it runs in the step. Make that tensor in `on_after_batch_transfer` (it is staged with the"
        " batch) or pass `backbone_input=` (a function of the batch).")
    assert_same_training(piped, serial)  # the draw stays in the step: the same random numbers as serial
    assert pipe.staged_calls == [] and "not staged: `backbone.forward` is called with argument 0" in pipe.report()


def test_a_frozen_child_found_without_a_name_warns_too():
    with pytest.warns(UserWarning, match="`backbone.forward` is called with argument 0 .* `randn_like`"):
        fit(StepConverts("noise"), dict(mode="on"), max_epochs=1)


def test_a_staged_input_that_differs_from_the_steps_stops_serving_with_one_warning():
    serial, _ = fit(StepConverts("changing_scale"), None)
    with pytest.warns(UserWarning, match="`backbone.forward`: the staged argument \\(batch\\[0\\].float.mul\\) differs"
                                         " from the float32 \\[4, 3, 8, 8\\] tensor `training_step` passes"):
        piped, pipe = fit(StepConverts("changing_scale"), dict(mode="on"))
    assert_same_training(piped, serial)
    assert pipe.staged_calls[0].hits == 0 and pipe.staged_calls[0].mismatch is not None
    assert "it stopped running ahead: the staged argument" in pipe.report()


def test_a_named_backbone_called_with_something_else_warns_at_the_first_step():
    with pytest.warns(UserWarning, match="`backbone.forward` is called with nothing made from the batch: nothing of"
                                         " it can be staged"):
        fit(StepConverts("zeros"), dict(mode="on", backbone="backbone"), max_epochs=1)


def test_backbone_input_given_by_the_user_is_checked_like_a_derivation():
    serial, _ = fit(StepConverts("float"), None)
    piped, pipe = fit(StepConverts("float"), dict(mode="on", backbone="backbone", backbone_input=lambda b: b[0].float()))
    assert_same_training(piped, serial)
    [call] = pipe.staged_calls
    assert call.hits == pipe.staged_batches and call.derivations() == "`backbone_input`"  # known from the start


class ShrinksLater(StepConverts):
    """After the first step the backbone gets a cropped input: the staged one never matches."""

    def backbone_input(self, x):
        x = x.float()
        return x if len(self.seen) == 1 else x[..., :4, :4].contiguous()

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(int(x.sum().item()))
        with torch.no_grad():
            features = nn.functional.interpolate(self.backbone(self.backbone_input(x)), size=(8, 8))
        loss = nn.functional.cross_entropy(self.head(features), y)
        self.losses.append(loss.item())
        return loss


def test_a_pipeline_that_serves_no_staged_output_says_so():
    with pytest.warns(UserWarning, match="`backbone.forward` served no staged output in 20 pipelined steps"):
        _, pipe = fit(ShrinksLater("float"), dict(mode="on"), max_epochs=2)
    assert pipe.staged_calls[0].hits == 0 and "no staged output was used" in pipe.report()


@pytest.mark.parametrize("bad", [dict(warmup=-1), dict(recheck=0), dict(augment="not callable"), dict(depth=True),
                                 dict(trial=True), dict(backbone_input=3), dict(backbone=3), dict(backbone=[]),
                                 dict(backbone_input=lambda b: b[0]), dict(backbone=["a", "b"], backbone_input=len)])
def test_arguments_out_of_range_are_refused(bad):
    with pytest.raises(ValueError, match="StreamPipeline: `"):
        StreamPipeline(**bad)


def test_constants_made_in_the_step_are_computed_once():
    """``torch.tensor([...], device=...)`` in the step: a host-to-device copy each time, which a CUDA graph
    cannot capture; the staged derivation computes it on its first run and keeps it."""
    _, pipe = fit(StepConverts("constants_made_in_step"), dict(mode="on"))
    folded = pipe._fit.calls.program.folded
    assert {tuple(t.shape) for t in folded.values()} == {(3,), (1, 3, 1, 1)}
    used = sorted(t.flatten()[0].item() for t in folded.values() if t.dim() == 4)
    assert used == pytest.approx([0.2, 0.2, 0.4])  # the view of std, std moved to the device, and the mean
