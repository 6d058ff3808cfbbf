"""Random parameters: per-sample, from torchvision's distributions, repeatable with a generator."""

import math

import pytest
import torch

from _transforms_util import make_generator
from lightning_streamprof.transforms import Compose, GaussianBlur, RandomCrop, RandomRotation, Resize, ToFloat

N = 20000


def _ks_uniform(values: torch.Tensor, low: float, high: float) -> float:
    v, _ = torch.sort(values.double().cpu())
    cdf = ((v - low) / (high - low)).clamp(0, 1)
    n = v.numel()
    upper = torch.arange(1, n + 1, dtype=torch.float64) / n - cdf
    lower = cdf - torch.arange(0, n, dtype=torch.float64) / n
    return float(torch.maximum(upper, lower).max())


KS_CRIT = 1.95 / math.sqrt(N)  # alpha = 0.001; seeds are fixed, so the tests cannot flake


def test_rotation_angle_uniform(device):
    p = RandomRotation(45).sample(N, 32, 32, device, make_generator(device, 1))
    assert p.angle.device.type == device.type and p.angle.shape == (N,)
    assert float(p.angle.min()) >= -45 and float(p.angle.max()) <= 45
    assert _ks_uniform(p.angle, -45, 45) < KS_CRIT
    p = RandomRotation((10, 30)).sample(N, 32, 32, device, make_generator(device, 2))
    assert _ks_uniform(p.angle, 10, 30) < KS_CRIT


def test_blur_sigma_uniform(device):
    p = GaussianBlur(7, (0.1, 2.0)).sample(N, 32, 32, device, make_generator(device, 3))
    assert _ks_uniform(p.sigma, 0.1, 2.0) < KS_CRIT


def test_crop_offsets_uniform_integers(device):
    p = RandomCrop((20, 28)).sample(N, 30, 32, device, make_generator(device, 4))
    for offsets, k in ((p.top, 11), (p.left, 5)):
        assert offsets.dtype == torch.int64
        counts = torch.bincount(offsets.cpu(), minlength=k).double()
        assert counts.numel() == k and int(counts.sum()) == N
        expected = N / k
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < (k - 1) + 5 * math.sqrt(2 * (k - 1))


@pytest.mark.parametrize("p_apply", [0.0, 0.3, 1.0])
def test_per_sample_probability(device, p_apply):
    rot = RandomRotation(45, p=p_apply).sample(N, 8, 8, device, make_generator(device, 5))
    frac = float((rot.angle != 0).double().mean())
    assert abs(frac - p_apply) < 4 * math.sqrt(max(p_apply * (1 - p_apply), 1e-9) / N) + 1e-9
    blur = GaussianBlur(3, p=p_apply)
    params = blur.sample(8, 16, 16, device, make_generator(device, 6))
    x = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(0)).to(device)
    out = blur.apply(x, params)
    kept = params.sigma == 0
    assert torch.allclose(out[kept], x[kept], atol=1e-6)


def _pipeline(generator=None):
    return Compose([ToFloat(), RandomCrop(24), Resize(32), RandomRotation(45), GaussianBlur(5)], generator=generator)


def test_same_seed_same_output_and_samples_differ(device):
    x = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)).to(device)
    a = _pipeline(make_generator(device, 7))(x)
    b = _pipeline(make_generator(device, 7))(x)
    c = _pipeline(make_generator(device, 8))(x)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    aug = _pipeline()
    g1, g2 = make_generator(device, 9), make_generator(device, 9)
    assert torch.equal(aug(x, generator=g1), aug(x, generator=g2))
    # the same image everywhere in the batch still comes out differently per sample
    same = x[:1].expand(6, -1, -1, -1).contiguous()
    params = aug.sample(6, 32, 32, device, make_generator(device, 10))
    assert len(set(params[1].top.tolist())) > 1 or len(set(params[1].left.tolist())) > 1
    assert len(set(params[3].angle.tolist())) == 6 and len(set(params[4].sigma.tolist())) == 6
    out = aug.apply(same, params)
    for i in range(1, 6):
        assert not torch.equal(out[0], out[i])


def test_deterministic_steps_take_no_parameters(device):
    assert Resize(8).sample(4, 16, 16, device) is None
    assert ToFloat().sample(4, 16, 16, device) is None
