"""Per-sample random parameters, drawn for the whole batch on the batch's device."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["CropParams", "RotationParams", "BlurParams", "uniform", "randint", "bernoulli"]


@dataclass(frozen=True)
class CropParams:
    """Top-left corner of each crop window: ``top`` and ``left`` are int64 tensors of shape ``(B,)``."""

    top: torch.Tensor
    left: torch.Tensor


@dataclass(frozen=True)
class RotationParams:
    """Counter-clockwise rotation angle in degrees per sample, float32 tensor of shape ``(B,)``."""

    angle: torch.Tensor


@dataclass(frozen=True)
class BlurParams:
    """Gaussian standard deviation per sample, float32 tensor of shape ``(B,)``."""

    sigma: torch.Tensor


def uniform(
    batch_size: int, low: float, high: float, device: torch.device, generator: torch.Generator | None
) -> torch.Tensor:
    """``(B,)`` float32 values uniform in ``[low, high)``, drawn on ``device``."""
    u = torch.rand(batch_size, generator=generator, device=device, dtype=torch.float32)
    return u.mul_(high - low).add_(low)


def randint(batch_size: int, high: int, device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """``(B,)`` int64 values uniform over ``0 .. high - 1``, drawn on ``device``."""
    return torch.randint(0, high, (batch_size,), generator=generator, device=device, dtype=torch.int64)


def bernoulli(batch_size: int, p: float, device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """``(B,)`` bool tensor, each entry ``True`` with probability ``p``."""
    return torch.rand(batch_size, generator=generator, device=device) < p
