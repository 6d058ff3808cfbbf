"""Small Lightning programs for the pipeline tests: a frozen backbone, a trainable head, a seeded
augmentation in ``on_after_batch_transfer``, and loaders of every kind Lightning distinguishes."""

from __future__ import annotations

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset


class Images(Dataset):
    def __init__(self, n: int = 48, size: int = 8) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class ImageStream(IterableDataset):
    def __init__(self, n: int = 48, size: int = 8) -> None:
        self.data = Images(n, size)

    def __iter__(self):
        return (self.data[i] for i in range(len(self.data)))


class Net(L.LightningModule):
    """Frozen ``backbone`` (eval) called with the batch's image tensor; trainable ``head``."""

    def __init__(self, augment_in_hook: bool = True, use_global_rng: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).requires_grad_(False).eval()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 8 * 8, 4))
        self.augment_in_hook = augment_in_hook
        self.use_global_rng = use_global_rng
        self.gen = torch.Generator().manual_seed(123)
        self.seen: list[int] = []  # checksum of each batch the step trained on
        self.transfers = 0
        self.losses: list[float] = []

    def train(self, mode: bool = True):
        super().train(mode)
        self.backbone.eval()
        return self

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.transfers += 1
        x, y = batch
        x = x.float() / 255
        if self.augment_in_hook and self.trainer.training:
            if self.use_global_rng:
                noise = torch.rand(x.shape[0], 1, 1, 1, device=x.device)
            else:
                noise = torch.rand(x.shape[0], 1, 1, 1, generator=self.gen).to(x.device)
            x = x * (0.5 + noise)
        return x, y

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(int(x.sum().item() * 1000))
        loss = nn.functional.cross_entropy(self.head(self.backbone(x)), y)
        self.losses.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.head(self.backbone(x)), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.head.parameters(), lr=0.1)


def loader(kind: str, batch_size: int = 4) -> DataLoader:
    data = ImageStream() if kind == "iterable" else Images()
    return DataLoader(data, batch_size=batch_size, shuffle=False)


class BusyNet(Net):
    """``Net`` in a loop as people write it: ``self.log`` in every hook that allows it, an LR scheduler stepped
    per batch, and a validation step."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def on_train_batch_start(self, batch, batch_idx):
        self.log("lr", self.trainer.optimizers[0].param_groups[0]["lr"])

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.log("step_loss", outputs["loss"].detach())

    def on_before_backward(self, loss):
        self.log("loss_before_backward", loss.detach())

    def on_train_epoch_end(self):
        self.log("epoch_losses", float(len(self.losses)))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.head.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class TwoLoaderNet(Net):
    """Trains on two dataloaders at once (Lightning's ``CombinedLoader``): the batch is a list of two batches,
    each going through the frozen backbone."""

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.transfers += 1
        return batch

    def training_step(self, batch, batch_idx):
        (xa, ya), (xb, yb) = batch
        self.seen.append(int(xa.sum().item()) + int(xb.sum().item()))
        fa, fb = self.backbone(xa.float() / 255), self.backbone(xb.float() / 255)
        loss = nn.functional.cross_entropy(self.head(fa), ya) + nn.functional.cross_entropy(self.head(fb), yb)
        self.losses.append(loss.item())
        return loss
