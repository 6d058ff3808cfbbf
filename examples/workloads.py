"""The seed workloads as Lightning programs: a frozen CNN encoder with a trainable segmentation head.

Synthetic data as in the published experiments: uint8 images ``3 x S x S`` and per-pixel int64 labels
(10 classes), made by DataLoader workers. Sizes left ``None`` are the published ones on a GPU and small ones on
CPU (:func:`sized`), so the same YAML config runs quickly anywhere.
"""

from __future__ import annotations

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


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
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

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
