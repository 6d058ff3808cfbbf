"""Per-pixel transforms: dtype conversion and normalisation."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._base import BatchTransform
from ._warp import fill_value

__all__ = ["ToFloat", "Normalize"]


class ToFloat(BatchTransform):
    """Convert to float32; integer input is scaled to [0, 1] by its dtype's maximum when ``scale``.

    Matches ``torchvision.transforms.v2.ToDtype(torch.float32, scale=True)`` exactly (float input is only cast).
    """

    def __init__(self, scale: bool = True) -> None:
        super().__init__(None)
        self.scale = scale

    def apply(self, batch: torch.Tensor, params=None) -> torch.Tensor:
        if batch.is_floating_point():
            return batch.to(torch.float32)
        out = batch.to(torch.float32)
        if self.scale:
            out = out.mul_(1.0 / torch.iinfo(batch.dtype).max)
        return out


class Normalize(BatchTransform):
    """``(x - mean) / std`` per channel on a float batch.

    Matches ``torchvision.transforms.v2.functional.normalize`` within 1e-6 (the per-channel constants are created
    once per device and dtype and cached, so later batches copy nothing from the host).
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__(None)
        if any(s == 0 for s in std):
            raise ValueError(f"std must be non-zero, got {std}")
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)

    def apply(self, batch: torch.Tensor, params=None) -> torch.Tensor:
        if not batch.is_floating_point():
            raise TypeError(f"Normalize expects a float batch, got {batch.dtype}; put ToFloat() before it")
        mean = fill_value(self.mean, batch.device, batch.dtype)
        std = fill_value(self.std, batch.device, batch.dtype)
        return (batch - mean) / std
