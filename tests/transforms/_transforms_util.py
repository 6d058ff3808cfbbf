"""Helpers shared by the transforms tests."""

import torch


def make_generator(device: torch.device, seed: int = 0) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def smooth_images(b: int, c: int, h: int, w: int, device, seed: int = 0) -> torch.Tensor:
    """Low-frequency images in [0, 1]: sums of a few random sinusoids per channel."""
    g = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, h).view(1, 1, h, 1)
    xs = torch.linspace(0, 1, w).view(1, 1, 1, w)
    out = torch.zeros(b, c, h, w)
    for _ in range(3):
        fx, fy, ph = (torch.rand(3, b, c, 1, 1, generator=g) * torch.tensor([3.0, 3.0, 6.28]).view(3, 1, 1, 1, 1))
        out += torch.sin(6.28 * (fx * xs + fy * ys) + ph)
    return ((out / 6) + 0.5).clamp(0, 1).to(device)
