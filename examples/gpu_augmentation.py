"""The GPU-augmentation workload: a CNN classifier whose batch augmentation (crop, resize, rotation, blur,
normalize; per-sample random) runs on the device in ``on_after_batch_transfer``; StreamPipeline runs it for
the next batch on a side stream while the current one trains.

    python examples/gpu_augmentation.py                        # small, CPU when there is no GPU
    python examples/gpu_augmentation.py --image-size 256 --batch-size 32 --steps 500 --workers 8
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from quiet import quiet_lightning  # noqa: E402
from workloads import sized  # noqa: E402

from lightning_streamprof import StreamPipeline, StreamProfiler  # noqa: E402
from lightning_streamprof import transforms as T  # noqa: E402


class RandomImages(Dataset):
    def __init__(self, length: int, size: int) -> None:
        self.length, self.size = length, size

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 256, (3, self.size, self.size), dtype=torch.uint8, generator=g), torch.tensor(i % 10)


class Classifier(L.LightningModule):
    """1x1 conv 3->16, then 2x2 stride-2 convs doubling the channels down to 1x1, flatten, linear to 10."""

    def __init__(self, image_size: int | None = 256, seed: int = 0) -> None:
        super().__init__()
        image_size = sized(image_size, 256, 32)
        layers: list[nn.Module] = [nn.Conv2d(3, 16, 1), nn.ReLU()]
        channels = 16
        for _ in range(int(math.log2(image_size))):
            layers += [nn.Conv2d(channels, 2 * channels, 2, stride=2), nn.ReLU()]
            channels *= 2
        self.net = nn.Sequential(*layers, nn.Flatten(), nn.Linear(channels, 10))
        crop = image_size // 2
        self.augment = T.Compose([
            T.ToFloat(),
            T.RandomCrop(crop),
            T.Resize(image_size),
            T.RandomRotation(45),
            T.GaussianBlur(7),
            T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ])
        self.seed = seed
        self._generator: torch.Generator | None = None

    def on_after_batch_transfer(self, batch, dataloader_idx):
        images, labels = batch
        if not self.trainer.training:
            return T.ToFloat()(images), labels
        if self._generator is None or self._generator.device != images.device:
            self._generator = torch.Generator(device=images.device).manual_seed(self.seed)
        return self.augment(images, generator=self._generator), labels

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = nn.functional.cross_entropy(self.net(images), labels)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class PerImageClassifier(Classifier):
    """The same classifier with the augmentation as the pipelining article writes it: torchvision.transforms.v2's
    functional ops applied one image at a time in ``on_after_batch_transfer``, each image with its own random
    crop, rotation and blur drawn from the module's own ``random.Random``."""

    def __init__(self, image_size: int | None = 256, seed: int = 0) -> None:
        super().__init__(image_size, seed)
        self.image_size = sized(image_size, 256, 32)
        self.rng = random.Random(seed)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import functional as F

        images, labels = batch
        if not self.trainer.training:
            return T.ToFloat()(images), labels
        size, crop, out = self.image_size, self.image_size // 2, []
        for image in images:
            image = F.to_dtype(image, torch.float32, scale=True)
            top, left = self.rng.randint(0, size - crop), self.rng.randint(0, size - crop)
            image = F.resize(image[:, top:top + crop, left:left + crop], [size, size], antialias=False,
                             interpolation=InterpolationMode.BILINEAR)
            image = F.rotate(image, self.rng.uniform(-45.0, 45.0), interpolation=InterpolationMode.BILINEAR)
            sigma = self.rng.uniform(0.1, 2.0)
            image = F.gaussian_blur(image, [7, 7], [sigma, sigma])
            out.append(F.normalize(image, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
        return torch.stack(out), labels


class ImageData(L.LightningDataModule):
    """Random uint8 images and labels for the classifier; ``None`` sizes are the published workload's on a GPU
    (256x256, batch 32, 8 workers, 500 steps) and small on CPU (32x32, batch 16, 2 workers, 40 steps)."""

    def __init__(self, batch_size: int | None = None, image_size: int | None = None, steps: int | None = None,
                 workers: int | None = None) -> None:
        super().__init__()
        batch_size = sized(batch_size, 32, 16)
        image_size = sized(image_size, 256, 32)
        steps = sized(steps, 500, 40)
        workers = sized(workers, 8, 2)
        self.save_hyperparameters()
        self.hparams.batch_size = batch_size
        self.hparams.image_size = image_size
        self.hparams.steps = steps
        self.hparams.workers = workers

    def train_dataloader(self) -> DataLoader:
        h = self.hparams
        return DataLoader(RandomImages(h.batch_size * h.steps, h.image_size), batch_size=h.batch_size,
                          num_workers=h.workers, pin_memory=torch.cuda.is_available(),
                          persistent_workers=h.workers > 0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pipeline", default="auto" if torch.cuda.is_available() else "on", choices=["auto", "on", "off"])
    p.add_argument("--root", default="streamprof_runs/gpu_augmentation")
    p.add_argument("--profile-at", type=int, default=10, help="steps before the profiled window")
    args = p.parse_args(argv)
    quiet_lightning()
    L.seed_everything(0, verbose=False)
    pipeline = StreamPipeline(backbone=False, mode=args.pipeline)
    trainer = L.Trainer(
        max_epochs=1, accelerator="auto", devices=1, default_root_dir=args.root, callbacks=[pipeline],
        profiler=StreamProfiler(skip_first=args.profile_at, warmup=1, active=3, every=0), enable_checkpointing=False,
        enable_model_summary=False,
    )
    loader = DataLoader(RandomImages(args.batch_size * args.steps, args.image_size), batch_size=args.batch_size,
                        num_workers=args.workers, pin_memory=torch.cuda.is_available(), persistent_workers=args.workers > 0)
    trainer.fit(Classifier(args.image_size), loader)  # the profiler's summary (with the pipeline's report) ends it


if __name__ == "__main__":
    main()
