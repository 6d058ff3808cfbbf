"""The workloads, defined once for the examples, the benchmarks and the GPU tests (whose zoo keeps tiny
configurations of the same models): :data:`WORKLOADS` names each with its shape and what it stands for, and
:func:`make` builds one as ``python -m benchmarks pipeline-speed --workloads NAME:BATCH`` trains it.

The seed workload is a frozen CNN encoder with a trainable segmentation head on synthetic data as in the published
experiments: uint8 images ``3 x S x S`` and per-pixel int64 labels (10 classes), made by DataLoader workers. Sizes
left ``None`` are the published ones on a GPU and small ones on CPU (:func:`sized`), so the same YAML config runs
quickly anywhere. The workloads with real model libraries (timm, diffusers, transformers, torchvision under
``torch.compile``) are written as their users write them and import those libraries when built; their data lives in
a pool of host tensors (no loader work), so that the step is what is measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)


def sized(value: int | None, gpu: int, cpu: int) -> int:
    """``value``, or when None the full size on a GPU and a small one on CPU."""
    if value is not None:
        return value
    return gpu if torch.cuda.is_available() else cpu


class SyntheticSegmentation(Dataset):
    """Random uint8 images and int64 label maps, reproducible per index."""

    def __init__(self, length: int, image_size: int = 256, classes: int = 10, seed: int = 0) -> None:
        self.length, self.image_size, self.classes, self.seed = length, image_size, classes, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        size = self.image_size
        image = torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=g)
        label = torch.randint(0, self.classes, (size, size), dtype=torch.int64, generator=g)
        return image, label


def conv_block(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Normalize(nn.Module):
    """uint8 images to ImageNet-normalised floats."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255)
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images.float() - self.mean) / self.std


class Encoder(nn.Sequential):
    """A small CNN encoder with output stride 8; takes the uint8 batch as it comes from the loader."""

    def __init__(self, width: int = 32) -> None:
        super().__init__(
            Normalize(),
            conv_block(3, width, 2),
            conv_block(width, width),
            conv_block(width, 2 * width, 2),
            conv_block(2 * width, 2 * width),
            conv_block(2 * width, 4 * width, 2),
            conv_block(4 * width, 4 * width),
        )
        self.out_channels = 4 * width


class Decoder(nn.Module):
    """Two conv blocks and an 8x upsampling to per-pixel logits."""

    def __init__(self, in_channels: int, classes: int = 10, width: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_block(in_channels, width), conv_block(width, width))
        self.classify = nn.Conv2d(width, classes, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        logits = self.classify(self.body(features))
        return nn.functional.interpolate(logits, scale_factor=8, mode="bilinear", align_corners=False)


class FrozenBackboneSegmenter(L.LightningModule):
    """Frozen encoder (eval mode, no gradients) + trainable decoder, CrossEntropy and SGD."""

    def __init__(self, classes: int = 10, width: int = 32, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encoder = Encoder(width).requires_grad_(False).eval()
        self.decoder = Decoder(self.encoder.out_channels, classes)
        self.loss = nn.CrossEntropyLoss()

    def train(self, mode: bool = True) -> FrozenBackboneSegmenter:
        super().train(mode)
        self.encoder.eval()  # frozen: BatchNorm statistics never change
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(images))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        loss = self.loss(self(images), labels)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        images, labels = batch
        self.log("val_loss", self.loss(self(images), labels))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.decoder.parameters(), lr=self.hparams.lr, momentum=0.9)


class SegmentationData(L.LightningDataModule):
    """Synthetic segmentation data: ``train_size`` uint8 images and int64 label maps made by ``workers`` processes.

    ``None``: 256x256 images, 16384 samples and 8 workers on a GPU (the published workload); 64x64, 480 samples
    and 2 workers on CPU.
    """

    def __init__(
        self, batch_size: int = 8, image_size: int | None = None, train_size: int | None = None, val_size: int = 0,
        workers: int | None = None,
    ) -> None:
        super().__init__()
        image_size = sized(image_size, 256, 64)
        train_size = sized(train_size, 16384, 480)
        workers = sized(workers, 8, 2)
        self.save_hyperparameters()
        self.hparams.image_size = image_size
        self.hparams.train_size = train_size
        self.hparams.workers = workers

    def _loader(self, length: int, seed: int, shuffle: bool) -> DataLoader:
        h = self.hparams
        return DataLoader(
            SyntheticSegmentation(length, h.image_size, seed=seed),
            batch_size=h.batch_size,
            shuffle=shuffle,
            num_workers=h.workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=h.workers > 0,
            drop_last=True,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.hparams.train_size, seed=0, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(max(self.hparams.val_size, self.hparams.batch_size), seed=1, shuffle=False)


class ArticleSegmenter(FrozenBackboneSegmenter):
    """The frozen-backbone workload as the pipelining article writes it: the encoder takes float images and
    ``training_step`` converts the uint8 batch right before it (``self.encoder(images.float())``)."""

    def __init__(self, classes: int = 10, width: int = 32, lr: float = 0.01) -> None:
        super().__init__(classes, width, lr)
        layers = list(Encoder(width).children())[1:]  # no Normalize: the encoder takes float images
        self.encoder = nn.Sequential(*layers).requires_grad_(False).eval()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            features = self.encoder(images.float())
        return self.decoder(features)


class ResidentImages(Dataset):
    """``length`` items drawn from a fixed pool of random uint8 images held in memory (a loader that keeps up)."""

    def __init__(self, length: int, image_size: int = 224, classes: int = 10, pool: int = 256, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (pool, 3, image_size, image_size), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, classes, (pool,), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        i = index % len(self.images)
        return self.images[i], self.labels[i]


class FrozenResNetClassifier(L.LightningModule):
    """The most common real case: a frozen torchvision ResNet-50 (``weights=None``, eval) with a trainable linear
    head; ``training_step`` normalises the uint8 batch before the backbone, as most training code does."""

    def __init__(self, classes: int = 10, lr: float = 0.01, arch: str = "resnet50") -> None:
        super().__init__()
        import torchvision

        self.save_hyperparameters()
        backbone = getattr(torchvision.models, arch)(weights=None)
        features = backbone.fc.in_features
        backbone.fc = nn.Identity()
        self.backbone = backbone.requires_grad_(False).eval()
        self.head = nn.Linear(features, classes)
        self.register_buffer("mean", torch.tensor(IMAGE_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGE_STD).view(1, 3, 1, 1))

    def train(self, mode: bool = True) -> FrozenResNetClassifier:
        super().train(mode)
        self.backbone.eval()
        return self

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        x = (images.float() / 255 - self.mean) / self.std
        with torch.no_grad():
            features = self.backbone(x)
        loss = nn.functional.cross_entropy(self.head(features), labels)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.head.parameters(), lr=self.hparams.lr, momentum=0.9)


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
    """uint8 images to ImageNet-normalised floats, as timm and torchvision users write it in the step (the constants
    made there, on the batch's device)."""
    mean = torch.tensor(IMAGE_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGE_STD, device=x.device).view(1, 3, 1, 1)
    return (x.float() / 255 - mean) / std


def timm_features(backbone: nn.Module, x: torch.Tensor, call: str = "forward") -> torch.Tensor:
    """A timm model's pooled features: ``backbone(x)``, or with ``call="features"`` as linear-probe code calls timm,
    ``forward_head(forward_features(x), pre_logits=True)``."""
    if call == "features":
        return backbone.forward_head(backbone.forward_features(x), pre_logits=True)
    return backbone(x)


def latent_diffusion_loss(module: nn.Module, batch: dict) -> torch.Tensor:
    """A latent-diffusion training step as diffusers' scripts write it, on ``module``'s ``vae``, ``text_encoder``
    and ``unet``: images encoded to latents, the text encoded, noise and timesteps drawn in the step, the UNet's
    prediction of the noise against it."""
    pixels = batch["image"].float() / 127.5 - 1
    latents = module.vae.encode(pixels).latent_dist.sample() * module.vae.config.scaling_factor
    text = module.text_encoder(batch["input_ids"])[0]
    noise = torch.randn_like(latents)
    t = torch.randint(0, 1000, (latents.shape[0],), device=latents.device)
    noisy = latents + noise * (t.float() / 1000).view(-1, 1, 1, 1)
    pred = module.unet(noisy, t, encoder_hidden_states=text).sample
    return nn.functional.mse_loss(pred.float(), noise.float())


class FrozenParts(L.LightningModule):
    """The submodules named in ``frozen`` take no gradient and stay in eval mode; SGD trains the rest."""

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
        features = timm_features(self.backbone, normalise(batch["image"]), self.call)
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
        return latent_diffusion_loss(self, batch)


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


def make_zoo(workload: str, length: int, image_size: int | None) -> tuple[L.LightningModule, Dataset]:
    """The model and dataset of a workload with a real model library."""
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


@dataclass(frozen=True)
class Workload:
    name: str
    shape: str  # the batch and the model
    stands_for: str  # the training code it stands for


WORKLOADS = {w.name: w for w in (
    Workload("article", "uint8 3x256x256 images and int64 256x256 label maps made by loader workers; a frozen CNN "
             "encoder, a trainable decoder", "the frozen-backbone segmentation of the pipelining article: "
             "``self.encoder(images.float())`` in ``training_step``"),
    Workload("resnet50", "uint8 3x224x224 images from a pool in memory; a frozen torchvision ResNet-50 "
             "(``weights=None``), a linear head", "the most common real case: the batch normalised in "
             "``training_step`` before a frozen backbone"),
    Workload("augment", "uint8 3x256x256 images made by loader workers; a small CNN classifier",
             "per-sample GPU augmentation (crop, resize, rotation, blur, normalize) in ``on_after_batch_transfer`` "
             "with this package's batch transforms (``examples/gpu_augmentation.py``)"),
    Workload("augmentv2", "the same", "the same augmentation as the article writes it: torchvision.transforms.v2, "
             "one image at a time"),
    Workload("vit", "dict batches of uint8 3x224x224 images; a frozen timm ViT-S/16, a linear head",
             "a linear probe calling timm through ``forward``"),
    Workload("vitff", "the same", "the same probe through ``forward_features``/``forward_head``"),
    Workload("ldm", "dict batches of uint8 3x128x128 images and 77 token ids; a frozen VAE (64-256 channels) and "
             "CLIP text encoder (4 layers of 256), a trainable UNet (64, 128)",
             "latent-diffusion fine-tuning as diffusers' training scripts write it"),
    Workload("ldmsu", "the same with a trainable UNet of 32, 64 channels", "the same step, a smaller denoiser"),
    Workload("ldmsd", "3x256x256 images; Stable Diffusion's frozen VAE (128-512, 8x down) and CLIP ViT-L/14 text "
             "encoder (12 layers of 768), a trainable UNet (64, 128) on 32x32 latents",
             "fine-tuning a small denoiser on Stable Diffusion's frozen parts"),
    Workload("resnet50c", "dict batches of uint8 3x224x224 images; a frozen ResNet-50 under ``torch.compile``, a "
             "linear head", "a compiled frozen backbone"),
    Workload("busy", "dict batches of uint8 3x224x224 images; a frozen ResNet-18, a trainable MLP head",
             "a loop that does more than train: validation every 100 steps, a checkpoint every 200, 2 batches "
             "accumulated, clipping, an LR schedule per batch, ``self.log`` in the step"),
)}


def make(workload: str, batch: int, length: int, workers: int, image_size: int | None = None):
    """The LightningModule of ``workload`` (a key of :data:`WORKLOADS`) and a loader of ``length`` samples in
    batches of ``batch``, ``workers`` loader processes."""
    if workload not in WORKLOADS:
        raise KeyError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
    if workload == "article":
        return ArticleSegmenter(), SegmentationData(batch, image_size or 256, length, workers=workers).train_dataloader()
    model = None
    if workload == "resnet50":
        data = ResidentImages(length, image_size or 224)
    elif workload in ("augment", "augmentv2"):
        from gpu_augmentation import Classifier, PerImageClassifier, RandomImages

        data = RandomImages(length, image_size or 256)
        model = (PerImageClassifier if workload == "augmentv2" else Classifier)(image_size or 256)
    else:
        model, data = make_zoo(workload, length, image_size)
    loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=workers, drop_last=True,
                        pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0)
    return model or FrozenResNetClassifier(), loader
