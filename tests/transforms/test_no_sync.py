"""The per-batch path never reads a device value on the host, copies host data or has data-dependent shapes."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from _transforms_util import make_generator
from lightning_streamprof.transforms import (
    Compose,
    GaussianBlur,
    Normalize,
    RandomCrop,
    RandomRotation,
    Resize,
    ToFloat,
)

FORBIDDEN = {
    "aten::_local_scalar_dense": "a tensor value read on the host (.item(), .tolist(), if tensor)",
    "aten::nonzero": "a data-dependent shape",
    "aten::masked_select": "a data-dependent shape",
    "aten::unique_dim": "a data-dependent shape",
    "aten::_unique2": "a data-dependent shape",
    "aten::lift_fresh": "a tensor made from host data (torch.tensor(...)): a host-to-device copy",
}


class NoSyncMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name in FORBIDDEN:
            raise AssertionError(f"{name}: {FORBIDDEN[name]}")
        if name == "aten::_to_copy" and "device" in (kwargs or {}) and kwargs["device"] != args[0].device:
            raise AssertionError(f"cross-device copy {args[0].device} -> {kwargs['device']}")
        self.seen.append(name)
        return func(*args, **(kwargs or {}))


def _pipelines():
    steps = [
        ToFloat(),
        RandomCrop(128),
        Resize(256),
        RandomRotation(45, fill=(0.1, 0.2, 0.3), p=0.5),
        GaussianBlur(7, p=0.5),
        Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ]
    return [Compose(steps), Compose(steps, merge=False)]


@pytest.mark.parametrize("merge", [True, False])
def test_pipeline_has_no_host_sync(device, merge):
    aug = _pipelines()[0 if merge else 1]
    g0 = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, 3, 256, 256), dtype=torch.uint8, generator=g0).to(device)
    g = make_generator(device)
    aug(x, generator=g)  # first call may create the cached per-channel constants
    mode = NoSyncMode()
    with mode:
        out = aug(x, generator=g)
    assert out.shape == (4, 3, 256, 256)
    assert "aten::grid_sample_2d" in mode.seen or "aten::grid_sampler_2d" in mode.seen or not merge


def test_mode_catches_item():
    with pytest.raises(AssertionError, match="_local_scalar_dense"):
        with NoSyncMode():
            torch.ones(3).sum().item()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_sync_debug_mode_error():
    aug = _pipelines()[0]
    x = torch.randint(0, 256, (8, 3, 256, 256), dtype=torch.uint8, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    aug(x, generator=g)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        aug(x, generator=g)
    finally:
        torch.cuda.set_sync_debug_mode("default")
