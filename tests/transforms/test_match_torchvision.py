"""Each transform, for fixed parameters, against torchvision's functional op applied image by image."""

import pytest
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from _transforms_util import make_generator, smooth_images
from lightning_streamprof.transforms import (
    GaussianBlur,
    Normalize,
    RandomCrop,
    RandomRotation,
    Resize,
    RotationParams,
    ToFloat,
    warp,
)

BILINEAR = InterpolationMode.BILINEAR
#: warp vs torchvision: the same sample points, each computed in float32 (ours by affine_grid in normalised
#: coordinates), so they differ by ~1e-5 px, growing with the image size; on white noise in [0, 1] (the steepest
#: gradients) the measured max is 3.2e-5 at 97x131 and 5.5e-5 at 256x256
WARP_TOL = 1e-4


def _rand(device, b=4, c=3, h=37, w=50, seed=0):
    return torch.rand(b, c, h, w, generator=torch.Generator().manual_seed(seed)).to(device)


def test_to_float_matches_to_dtype(device):
    x = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)).to(device)
    ref = TF.to_dtype(x, torch.float32, scale=True)
    assert torch.equal(ToFloat()(x), ref)
    assert torch.equal(ToFloat(scale=False)(x), x.float())


@pytest.mark.parametrize("size", [(20, 30), (37, 50), (1, 1)])
def test_crop_equals_torchvision_exactly(device, size):
    x = _rand(device)
    crop = RandomCrop(size)
    p = crop.sample(4, 37, 50, device, make_generator(device))
    out = crop.apply(x, p)
    ref = torch.stack([TF.crop(x[i], int(p.top[i]), int(p.left[i]), *size) for i in range(4)])
    assert torch.equal(out, ref)
    xu = (x * 255).to(torch.uint8)
    ref_u = torch.stack([TF.crop(xu[i], int(p.top[i]), int(p.left[i]), *size) for i in range(4)])
    assert torch.equal(crop.apply(xu, p), ref_u)
    # as a warp (a pure translation by whole pixels): float rounding only
    assert (warp(x, [(crop, p)]) - ref).abs().max() < WARP_TOL


@pytest.mark.parametrize("size", [(74, 100), (128, 128), (20, 17), (37, 50)])
def test_resize_matches_torchvision(device, size):
    x = _rand(device)
    ref = TF.resize(x, list(size), interpolation=BILINEAR, antialias=False)
    assert (Resize(size)(x) - ref).abs().max() < 1e-6
    # the warp path: same sample points, same edge clamping -> equal to float precision, borders included
    diff = (warp(x, [(Resize(size), None)]) - ref).abs()
    assert diff.max() < WARP_TOL  # borders included: the warp clamps at the edge pixels' centres, as interpolate does


def test_resize_uint8_and_antialias(device):
    x = (_rand(device) * 255).to(torch.uint8)
    ref = TF.resize(x, [20, 25], interpolation=BILINEAR, antialias=False)
    assert (Resize((20, 25))(x).int() - ref.int()).abs().max() <= 1
    xf = _rand(device)
    ref = TF.resize(xf, [20, 25], interpolation=BILINEAR, antialias=True)
    assert (Resize((20, 25), antialias=True)(xf) - ref).abs().max() < 1e-6


@pytest.mark.parametrize("hw", [(37, 50), (97, 131), (256, 256)])
@pytest.mark.parametrize("fill", [0.0, 0.5, (0.1, 0.2, 0.3)])
def test_rotation_matches_torchvision(device, fill, hw):
    x = _rand(device, h=hw[0], w=hw[1])
    rot = RandomRotation(180, fill=fill)
    p = rot.sample(4, *hw, device, make_generator(device))
    p = RotationParams(angle=torch.cat([p.angle[:2], torch.tensor([30.0, -170.0], device=device)]))
    out = rot.apply(x, p)
    fill_arg = list(fill) if isinstance(fill, tuple) else fill
    ref = torch.stack(
        [
            TF.rotate(x[i], float(p.angle[i]), interpolation=BILINEAR, expand=False, center=None, fill=fill_arg)
            for i in range(4)
        ]
    )
    assert (out - ref).abs().max() < WARP_TOL


def test_rotation_square_multiples_of_90(device):
    x = _rand(device, h=32, w=32)
    rot = RandomRotation(0)
    angles = torch.tensor([0.0, 90.0, 180.0, -90.0], device=device)
    out = rot.apply(x, RotationParams(angle=angles))
    for i in range(4):
        ref = TF.rotate(x[i], float(angles[i]), interpolation=BILINEAR, fill=0)
        assert (out[i] - ref).abs().max() < WARP_TOL


@pytest.mark.parametrize("kernel_size", [3, 7])
def test_blur_matches_torchvision(device, kernel_size):
    x = _rand(device)
    blur = GaussianBlur(kernel_size)
    p = blur.sample(4, 37, 50, device, make_generator(device))
    out = blur.apply(x, p)
    ref = torch.stack([TF.gaussian_blur(x[i], [kernel_size] * 2, [float(p.sigma[i])] * 2) for i in range(4)])
    assert (out - ref).abs().max() < 1e-5
    xu = (x * 255).to(torch.uint8)
    ref_u = torch.stack([TF.gaussian_blur(xu[i], [kernel_size] * 2, [float(p.sigma[i])] * 2) for i in range(4)])
    assert (blur.apply(xu, p).int() - ref_u.int()).abs().max() <= 1


def test_normalize_matches_torchvision(device):
    x = smooth_images(4, 3, 16, 16, device)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    ref = TF.normalize(x, list(mean), list(std))
    assert (Normalize(mean, std)(x) - ref).abs().max() < 1e-6
    with pytest.raises(TypeError):
        Normalize(mean, std)((x * 255).to(torch.uint8))
