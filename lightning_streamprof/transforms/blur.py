"""Gaussian blur with a per-sample sigma: two 1-D grouped convolutions over the whole batch."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ._base import BatchTransform, restore_dtype, to_float
from ._params import BlurParams, bernoulli, uniform

__all__ = ["GaussianBlur", "gaussian_kernels"]


def gaussian_kernels(kernel_size: int, sigma: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(B, k)`` normalised 1-D Gaussian kernels, one per sigma, on sigma's device (torchvision's formula)."""
    half = (kernel_size - 1) / 2
    x = torch.linspace(-half, half, steps=kernel_size, device=sigma.device, dtype=dtype)
    pdf = torch.exp(-0.5 * (x.view(1, -1) / sigma.to(dtype).view(-1, 1)) ** 2)
    return pdf / pdf.sum(dim=1, keepdim=True)


@functools.lru_cache(maxsize=32)
def _half_squares(kernel_size: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``-x^2 / 2`` at the kernel's taps, ``(1, k)``, cached per device."""
    half = (kernel_size - 1) / 2
    x = torch.linspace(-half, half, steps=kernel_size, device=device, dtype=dtype)
    return (x * x * -0.5).view(1, -1)


class GaussianBlur(BatchTransform):
    """Blur each image with its own sigma, uniform in ``sigma`` (the same sigma along x and y).

    Matches ``torchvision.transforms.v2.GaussianBlur(kernel_size, sigma)`` drawn per sample; for a given sigma the
    result equals ``torchvision.transforms.v2.functional.gaussian_blur(img, [k, k], [s, s])`` within 1e-5 on [0, 1]
    images: same kernel, reflect padding of ``k // 2``, computed as a horizontal then a vertical pass (grouped
    convolutions with one kernel per image, the batch folded into channels). uint8 input is computed in float32 and
    rounded back, like torchvision. With probability ``1 - p`` a sample is left unchanged.

    Args:
        kernel_size: odd, positive size of the square kernel.
        sigma: ``(min, max)`` range of the standard deviation, or one value.
        p: per-sample probability of blurring.
        generator: optional ``torch.Generator`` on the batch's device.
    """

    def __init__(
        self,
        kernel_size: int,
        sigma: float | Sequence[float] = (0.1, 2.0),
        p: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(generator)
        if kernel_size <= 0 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}")
        if isinstance(sigma, (int, float)):
            sigma = (float(sigma), float(sigma))
        if not 0 < sigma[0] <= sigma[1]:
            raise ValueError(f"sigma must satisfy 0 < min <= max, got {sigma}")
        self.kernel_size = int(kernel_size)
        self.sigma = (float(sigma[0]), float(sigma[1]))
        self.p = float(p)

    def sample(self, batch_size, height, width, device, generator=None) -> BlurParams:
        g = self._generator(generator)
        dev = torch.device(device)
        sigma = uniform(batch_size, self.sigma[0], self.sigma[1], dev, g)
        if self.p < 1.0:
            keep = bernoulli(batch_size, self.p, dev, g)
            sigma = torch.where(keep, sigma, torch.zeros_like(sigma))
        return BlurParams(sigma=sigma)

    def apply(self, batch: torch.Tensor, params: BlurParams) -> torch.Tensor:
        b, c, h, w = batch.shape
        k = self.kernel_size
        x = to_float(batch)
        sigma = params.sigma if params.sigma.dtype == x.dtype else params.sigma.to(x.dtype)
        if self.p < 1.0:
            sigma = sigma.clamp(min=1e-6)
        pdf = torch.exp(_half_squares(k, x.device, x.dtype) / (sigma * sigma).view(b, 1))
        kernels = pdf / pdf.sum(dim=1, keepdim=True)
        if self.p < 1.0:
            delta = (torch.arange(k, device=x.device) == k // 2).to(x.dtype).view(1, k)
            kernels = torch.where((params.sigma > 0).view(-1, 1), kernels, delta)
        weight = kernels.view(b, 1, k).expand(b, c, k).reshape(b * c, 1, k)
        pad = k // 2
        y = F.pad(x, [pad, pad, pad, pad], mode="reflect").reshape(1, b * c, h + 2 * pad, w + 2 * pad)
        y = F.conv2d(y, weight.unsqueeze(2), groups=b * c)
        y = F.conv2d(y, weight.unsqueeze(3), groups=b * c)
        return restore_dtype(y.view(b, c, h, w), batch.dtype)
