"""StreamPipeline on models from the libraries Lightning users train with, called the way those libraries are
called: every frozen call is found with no arguments, staged, used in every step after the first, and training
equals serial training."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch import nn
from zoo_models import (
    ClipTowers,
    CompiledBackbone,
    KorniaAugmented,
    LatentDiffusion,
    TimmProbe,
    Zoo,
    batch_encoding_collate,
    loader,
    normalise,
)

from lightning_streamprof import StreamPipeline

pytest.importorskip("timm")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")
pytest.importorskip("kornia")

STEPS = 6

CASES = {
    "timm_cnn_forward": (lambda: TimmProbe("convnext", "forward"), ["backbone.forward"], {}),
    "timm_cnn_features": (lambda: TimmProbe("convnext", "features"),
                          ["backbone.forward_features", "backbone.forward_head"], {}),
    "timm_vit_forward": (lambda: TimmProbe("vit", "forward"), ["backbone.forward"], {}),
    "timm_vit_features": (lambda: TimmProbe("vit", "features"),
                          ["backbone.forward_features", "backbone.forward_head"], {}),
    "clip_towers_keywords": (ClipTowers, ["vision.forward", "text.forward"], {}),
    "clip_towers_batch_encoding": (ClipTowers, ["vision.forward", "text.forward"],
                                   dict(collate=batch_encoding_collate)),
    "clip_model_get_features": (lambda: ClipTowers("features"),
                                ["clip.get_image_features", "clip.get_text_features"], {}),
    "latent_diffusion": (LatentDiffusion, ["vae.encode", "text_encoder.forward"], {}),
    "latent_diffusion_bf16": (LatentDiffusion, ["vae.encode", "text_encoder.forward"], dict(precision="bf16-mixed")),
    "compiled_torchvision": (CompiledBackbone, ["backbone.forward"], {}),
    "kornia_in_hook": (KorniaAugmented, [], {}),
}


def fit(model: Zoo, pipe: StreamPipeline | None, collate=None, precision="32-true", steps=STEPS,
        accelerator="cpu") -> Zoo:
    trainer = L.Trainer(accelerator=accelerator, devices=1, max_steps=steps, callbacks=[pipe] if pipe else [], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        precision=precision)
    trainer.fit(model, loader(collate=collate))
    return model


def assert_same_training(piped: Zoo, serial: Zoo) -> None:
    assert piped.losses == serial.losses
    for a, b in zip(piped.trainable(), serial.trainable()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("case", list(CASES))
def test_zoo_model_is_staged_with_no_arguments_and_equals_serial(case):
    make, labels, kwargs = CASES[case]
    torch.manual_seed(7)  # the step's own random draws (noise, timesteps, latent sampling) alike in both runs
    serial = fit(make(), None, **kwargs)
    pipe = StreamPipeline(mode="on")
    torch.manual_seed(7)
    piped = fit(make(), pipe, **kwargs)
    assert_same_training(piped, serial)
    assert [c.label for c in pipe.staged_calls] == labels
    assert pipe.staged_batches == STEPS
    for call in pipe.staged_calls:  # found in the first step; every later step used its staged output
        assert call.hits == STEPS - 1 and call.mismatch is None, pipe.report()
    for label in labels:
        assert f"staged `{label}`" in pipe.report()
    assert not any(name in vars(m) for c in pipe.staged_calls for m in (c.module,) for name in (c.method,)
                   if not isinstance(m, torch._dynamo.eval_frame.OptimizedModule))  # methods put back


def test_outputs_keep_their_types():
    """A ``ModelOutput`` and diffusers' output objects reach the step as the types the library returns."""
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    seen = []

    class Spy(LatentDiffusion):
        def training_step(self, batch, batch_idx):
            seen.append((type(self.vae.encode(batch["image"].float() / 127.5 - 1).latent_dist),
                         type(self.text_encoder(batch["input_ids"]))))
            return super().training_step(batch, batch_idx)

    pipe = StreamPipeline(mode="on")
    fit(Spy(), pipe)
    assert pipe.staged_calls[0].hits == STEPS - 1  # the spy's call was served; the step's second call computed
    assert set(seen) == {(DiagonalGaussianDistribution, BaseModelOutputWithPooling)}


def test_named_list_of_frozen_modules_and_the_staging_thread():
    torch.manual_seed(7)
    serial = fit(LatentDiffusion(), None)
    pipe = StreamPipeline(mode="on", backbone=["vae", "text_encoder"], staging_thread=True, depth=2)
    torch.manual_seed(7)
    piped = fit(LatentDiffusion(), pipe)
    assert_same_training(piped, serial)
    assert [c.hits for c in pipe.staged_calls] == [STEPS - 1, STEPS - 1]
    assert "staging thread" in pipe.report()


class DropoutTeacher(Zoo):
    """A frozen module left in training mode with dropout: its calls draw random numbers."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.teacher = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 16), nn.Dropout(0.5)).requires_grad_(False)
        self.student = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 16))

    def training_step(self, batch, batch_idx):
        x = normalise(batch["image"])
        return self.record(nn.functional.mse_loss(self.student(x), self.teacher(x)))


def test_a_frozen_call_that_draws_random_numbers_is_named_and_computed_in_the_step():
    torch.manual_seed(7)
    serial = fit(DropoutTeacher(), None)
    torch.manual_seed(7)
    with pytest.warns(UserWarning, match="`teacher.forward` draws random numbers .the global generator advanced during the call.; it runs in the step. Call `.eval\(\)` on it"):
        piped = fit(DropoutTeacher(), pipe := StreamPipeline(mode="on"))
    assert_same_training(piped, serial)
    assert pipe.staged_calls == [] and "not staged: `teacher.forward`" in pipe.report()


class EmaTeacher(Zoo):
    """Distillation from a frozen teacher that follows the student by an exponential moving average after
    every step (``.data`` updated in place, as momentum encoders do)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.student = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 16))
        self.teacher = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 16)).requires_grad_(False)

    def training_step(self, batch, batch_idx):
        x = normalise(batch["image"])
        return self.record(nn.functional.mse_loss(self.student(x), self.teacher(x) + 1))

    def on_train_batch_end(self, outputs, batch, batch_idx):
        for t, s in zip(self.teacher.parameters(), self.student.parameters()):
            t.data.mul_(0.5).add_(s.data, alpha=0.5)


def test_a_frozen_module_whose_weights_change_between_steps_stops_running_ahead():
    serial = fit(EmaTeacher(), None)
    with pytest.warns(UserWarning, match="`teacher.forward`: its staged output differs from the output computed in"
                                         " the step"):
        piped = fit(EmaTeacher(), pipe := StreamPipeline(mode="on"))
    assert_same_training(piped, serial)
    [call] = pipe.staged_calls
    assert call.hits == 0 and call.mismatch is not None


class FrozenOnTrainable(Zoo):
    """A frozen network scoring a trainable one's output (a perceptual loss): nothing of it can run ahead."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.generator = nn.Conv2d(3, 3, 3, padding=1)
        self.critic = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten()).requires_grad_(False).eval()

    def training_step(self, batch, batch_idx):
        x = normalise(batch["image"])
        return self.record(self.critic(self.generator(x)).pow(2).mean())


def test_a_frozen_call_on_the_trainable_outputs_is_said_at_info_level(caplog, recwarn):
    pipe = StreamPipeline(mode="on")
    fit(FrozenOnTrainable(), pipe)
    assert not [w for w in recwarn if "StreamPipeline" in str(w.message)]
    assert "`critic.forward` is called with argument 0" in caplog.text and "depends on the trainable weights" in caplog.text
    assert pipe.staged_calls == []


def test_kornia_on_the_global_generator_without_seeding_still_trains_every_batch():
    pipe = StreamPipeline(mode="on")
    model = fit(KorniaAugmented(seeded=False), pipe)
    assert model.augmented == STEPS and pipe.staged_batches == STEPS and len(model.losses) == STEPS


class ShardedTeacher(DropoutTeacher):
    """A frozen module whose weights are marked as FSDP's (``use_orig_params``), in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.teacher.eval()
        for p in self.teacher.parameters():
            p._fsdp_flattened = True


def test_a_sharded_frozen_module_is_named_once_and_computed_in_the_step_where_streams_stage(monkeypatch):
    """With CUDA streams and a staging thread, a sharded module's all-gathers would leave the step's order:
    it is refused (here forced, as on a GPU) with one warning, and training equals serial."""
    from lightning_streamprof.pipeline import calls as pipeline_calls
    from lightning_streamprof.pipeline.probe import CallProbe

    monkeypatch.setattr(pipeline_calls, "CallProbe", lambda watched, refuse_sharded: CallProbe(watched, True))
    serial = fit(ShardedTeacher(), None)
    with pytest.warns(UserWarning) as record:
        piped = fit(ShardedTeacher(), pipe := StreamPipeline(mode="on"))
    named = [str(w.message) for w in record if "sharded across ranks" in str(w.message)]
    assert len(named) == 1 and named[0].startswith("StreamPipeline: `teacher.forward` is sharded across ranks (its"
                                                   " weights are sharded by FSDP)")
    assert_same_training(piped, serial)
    assert pipe.staged_calls == []


def test_sharded_recognises_dtensor_weights(tmp_path):
    import torch.distributed as dist
    from torch.distributed.tensor import DeviceMesh, Replicate, distribute_tensor

    from lightning_streamprof.pipeline.frozen import sharded

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = DeviceMesh("cpu", [0])
        layer = nn.Linear(4, 4)
        assert sharded(layer) is None
        layer.weight = nn.Parameter(distribute_tensor(layer.weight.detach(), mesh, [Replicate()]))
        assert sharded(layer) == "its weights are DTensors (FSDP2 or tensor parallel)"
    finally:
        dist.destroy_process_group()
