"""Full-size workloads with real model libraries, written as their users write them (DESIGN.md §8), for
``pipeline_runs.py``:

- ``vit``: a frozen timm ViT-S/16 (``pretrained=False, num_classes=0``) and a linear head; dict batches
  ``{"image", "label"}`` of uint8 224x224 images, normalised in ``training_step``; called as ``self.backbone(x)``;
- ``vitff``: the same called as linear-probe code calls timm, ``forward_head(forward_features(x), pre_logits=True)``;
- ``ldm``: latent-diffusion fine-tuning as diffusers' training scripts write it: a frozen ``AutoencoderKL``
  (``vae.encode(x).latent_dist.sample() * scaling_factor``) and a frozen CLIP text encoder
  (``text_encoder(input_ids)[0]``) on the batch, noise and timesteps drawn in the step, a trainable
  ``UNet2DConditionModel`` (channels 64, 128; ``ldmsu``: a smaller one, 32, 64);
- ``ldmsd``: the same step with Stable Diffusion's frozen parts at their own sizes (the VAE of ``sd-vae-ft-mse``:
  channels 128-512, 8x down, on 256x256 images; the CLIP ViT-L/14 text encoder: 12 layers of 768) and the small
  trainable UNet (64, 128) on the 32x32 latents: the proportions of fine-tuning a small denoiser on SD's frozen parts;
- ``resnet50c``: a frozen torchvision ResNet-50 under ``torch.compile`` (inductor), normalised input, linear head;
- ``busy``: a loop that validates every 100 steps, checkpoints every 200, accumulates 2 batches, clips gradients
  and schedules the learning rate, on a frozen torchvision ResNet-18 and a trainable MLP head (``pipeline_runs.py``
  gives it a validation loader with persistent workers, as Lightning's hint advises).

Data lives in a pool of host tensors (no loader work), so that the step is what is measured.
"""

from __future__ import annotations

import lightning as L
import torch
from torch import nn
from torch.utils.data import Dataset

IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)


class DictImages(Dataset):
    """``{"image": uint8 3xSxS, "label", "input_ids": int64 [tokens]}`` drawn from a small pool."""

    def __init__(self, length: int, size: int = 224, tokens: int = 77, vocab: int = 1000, pool: int = 256) -> None:
        g = torch.Generator().manual_seed(0)
        self.length = length
        self.images = torch.randint(0, 256, (pool, 3, size, size), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (pool,), generator=g)
        self.ids = torch.randint(0, vocab, (pool, tokens), generator=g)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        j = i % len(self.images)
        return {"image": self.images[j], "label": self.labels[j], "input_ids": self.ids[j]}


def normalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGE_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGE_STD, device=x.device).view(1, 3, 1, 1)
    return (x.float() / 255 - mean) / std


class FrozenParts(L.LightningModule):
    frozen: tuple[str, ...] = ()

    def freeze_parts(self) -> None:
        for name in self.frozen:
            self.get_submodule(name).requires_grad_(False).eval()

    def train(self, mode: bool = True):
        super().train(mode)
        for name in self.frozen:
            self.get_submodule(name).eval()
        return self

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.01, momentum=0.9)


class TimmLinearProbe(FrozenParts):
    frozen = ("backbone",)

    def __init__(self, call: str = "forward", arch: str = "vit_small_patch16_224", **create: object) -> None:
        super().__init__()
        import timm

        self.backbone = timm.create_model(arch, pretrained=False, num_classes=0, **create)  # e.g. img_size
        self.freeze_parts()
        self.head = nn.Linear(self.backbone.num_features, 10)
        self.call = call

    def training_step(self, batch, batch_idx):
        x = normalise(batch["image"])
        if self.call == "features":
            features = self.backbone.forward_head(self.backbone.forward_features(x), pre_logits=True)
        else:
            features = self.backbone(x)
        return nn.functional.cross_entropy(self.head(features), batch["label"])


class LatentDiffusionFineTune(FrozenParts):
    frozen = ("vae", "text_encoder")

    def __init__(self, size: int = 128, unet_channels: tuple[int, int] = (64, 128), sd_sizes: bool = False) -> None:
        super().__init__()
        from diffusers import AutoencoderKL, UNet2DConditionModel
        from transformers import CLIPTextConfig, CLIPTextModel

        vae_channels = (128, 256, 512, 512) if sd_sizes else (64, 128, 256)
        width, layers = (768, 12) if sd_sizes else (256, 4)
        self.vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2,
                                 block_out_channels=vae_channels, norm_num_groups=32,
                                 down_block_types=("DownEncoderBlock2D",) * len(vae_channels),
                                 up_block_types=("UpDecoderBlock2D",) * len(vae_channels))
        self.text_encoder = CLIPTextModel(CLIPTextConfig(hidden_size=width, intermediate_size=4 * width,
                                                         num_hidden_layers=layers, num_attention_heads=width // 64,
                                                         vocab_size=1000, max_position_embeddings=77, bos_token_id=0,
                                                         eos_token_id=1, pad_token_id=0))
        latent = size // 2 ** (len(vae_channels) - 1)
        self.unet = UNet2DConditionModel(sample_size=latent, in_channels=4, out_channels=4, layers_per_block=1,
                                         block_out_channels=unet_channels, norm_num_groups=32, attention_head_dim=8,
                                         down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                         up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=width)
        self.freeze_parts()

    def training_step(self, batch, batch_idx):
        pixels = batch["image"].float() / 127.5 - 1
        latents = self.vae.encode(pixels).latent_dist.sample() * self.vae.config.scaling_factor
        text = self.text_encoder(batch["input_ids"])[0]
        noise = torch.randn_like(latents)
        t = torch.randint(0, 1000, (latents.shape[0],), device=latents.device)
        noisy = latents + noise * (t.float() / 1000).view(-1, 1, 1, 1)
        pred = self.unet(noisy, t, encoder_hidden_states=text).sample
        return nn.functional.mse_loss(pred.float(), noise.float())


class CompiledResNet(FrozenParts):
    frozen = ("backbone",)

    def __init__(self) -> None:
        super().__init__()
        import torchvision

        net = torchvision.models.resnet50(weights=None)
        net.fc = nn.Identity()
        net.requires_grad_(False).eval()
        self.backbone = torch.compile(net)
        self.head = nn.Linear(2048, 10)

    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self.head(self.backbone(normalise(batch["image"]))), batch["label"])


def make(workload: str, length: int, image_size: int | None) -> tuple[L.LightningModule, Dataset]:
    if workload in ("vit", "vitff"):
        return TimmLinearProbe("features" if workload == "vitff" else "forward"), DictImages(length, image_size or 224)
    if workload in ("ldm", "ldmsu", "ldmsd"):
        size = image_size or (256 if workload == "ldmsd" else 128)
        unet = (32, 64) if workload == "ldmsu" else (64, 128)
        return LatentDiffusionFineTune(size, unet, sd_sizes=workload == "ldmsd"), DictImages(length, size)
    if workload == "resnet50c":
        return CompiledResNet(), DictImages(length, image_size or 224)
    if workload == "busy":
        return BusyLoop(), DictImages(length, image_size or 224)
    raise KeyError(workload)


class BusyLoop(FrozenParts):
    """A training loop that does more than train: a frozen torchvision ResNet-18 and a trainable MLP head,
    validation every 100 steps, a checkpoint every 200, gradient accumulation over 2 batches, gradient clipping,
    an LR scheduler stepped per batch and ``self.log`` in the step (the Trainer's part: :func:`busy_trainer_options`)."""

    frozen = ("backbone",)

    def __init__(self) -> None:
        super().__init__()
        import torchvision

        self.backbone = torchvision.models.resnet18(weights=None)
        self.backbone.fc = nn.Identity()
        self.freeze_parts()
        self.head = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def training_step(self, batch, batch_idx):
        loss = nn.functional.cross_entropy(self.head(self.backbone(normalise(batch["image"]))), batch["label"])
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", nn.functional.cross_entropy(self.head(self.backbone(normalise(batch["image"]))),
                                                         batch["label"]))

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.head.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def busy_trainer_options(checkpoint_dir: str) -> dict:
    """The Trainer arguments and callbacks of :class:`BusyLoop` (steps counted in optimizer steps)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    return dict(val_check_interval=100, check_val_every_n_epoch=None, limit_val_batches=10, accumulate_grad_batches=2,
                gradient_clip_val=1.0,
                num_sanity_val_steps=0, enable_checkpointing=True,
                callbacks=[ModelCheckpoint(dirpath=checkpoint_dir, every_n_train_steps=200, save_top_k=-1)])
