"""One affine warp for a chain of geometric steps: per-sample matrices composed, one affine_grid + grid_sample."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ._base import GeometricTransform, restore_dtype, to_float

__all__ = ["const", "mat", "product", "translation", "rotation", "warp", "chain_sizes", "fill_value"]

#: a constant 3x3 matrix as nested tuples of floats
Mat = tuple
#: a factor of a per-sample matrix product: a (B, 3, 3) tensor or a constant
Factor = "torch.Tensor | Mat"


@functools.lru_cache(maxsize=256)
def const(values: tuple, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A constant tensor from nested tuples, created on ``device`` once and cached (later calls copy nothing)."""
    return torch.tensor(values, dtype=dtype).to(device)


def translation(tx: torch.Tensor, ty: torch.Tensor) -> torch.Tensor:
    """``(B, 3, 3)`` float32 translations by per-sample ``(tx, ty)``."""
    b = tx.shape[0]
    t = torch.stack([tx, ty], 1)
    if t.dtype != torch.float32:
        t = t.to(torch.float32)
    t = F.pad(t.view(b, 2, 1), (2, 0, 0, 1))
    return t + const((mat(((1, 0, 0), (0, 1, 0))),), tx.device)


def rotation(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``(B, 3, 3)`` float32 rotations ``[[cos, -sin, 0], [sin, cos, 0], [0, 0, 1]]``."""
    rot = F.pad(torch.stack([cos, -sin, sin, cos], 1).view(-1, 2, 2), (0, 1, 0, 1))
    return rot + const((mat(((0, 0, 0), (0, 0, 0))),), cos.device)


@functools.lru_cache(maxsize=1024)
def _mat(rows: tuple) -> Mat:
    full = tuple(tuple(float(v) for v in r) for r in rows)
    return full + ((0.0, 0.0, 1.0),) if len(full) == 2 else full


def mat(rows: Sequence[Sequence[float]]) -> Mat:
    """A constant 3x3 matrix (the last row ``[0, 0, 1]`` is added when two rows are given)."""
    return _mat(tuple(tuple(r) for r in rows))


@functools.lru_cache(maxsize=1024)
def _mat_mul(a: Mat, b: Mat) -> Mat:
    (a0, a1, a2), (a3, a4, a5), (a6, a7, a8) = a
    (b0, b1, b2), (b3, b4, b5), (b6, b7, b8) = b
    return (
        (a0 * b0 + a1 * b3 + a2 * b6, a0 * b1 + a1 * b4 + a2 * b7, a0 * b2 + a1 * b5 + a2 * b8),
        (a3 * b0 + a4 * b3 + a5 * b6, a3 * b1 + a4 * b4 + a5 * b7, a3 * b2 + a4 * b5 + a5 * b8),
        (a6 * b0 + a7 * b3 + a8 * b6, a6 * b1 + a7 * b4 + a8 * b7, a6 * b2 + a7 * b5 + a8 * b8),
    )


def product(factors: Sequence[Factor], batch_size: int, device: torch.device) -> torch.Tensor:
    """The product of constant and per-sample ``(B, 3, 3)`` factors; constants are multiplied on the host first.

    Returns ``(B, 3, 3)``, or a cached ``(1, 3, 3)`` tensor when every factor is constant.
    """
    folded: list = []
    for f in factors:
        if isinstance(f, tuple) and folded and isinstance(folded[-1], tuple):
            folded[-1] = _mat_mul(folded[-1], f)
        else:
            folded.append(f)
    out: torch.Tensor | None = None
    for f in folded:
        t = const((f,), device) if isinstance(f, tuple) else f
        if out is None:
            out = t
        elif out.shape[0] == 1 and t.shape[0] == 1:
            out = torch.bmm(out, t)
        else:
            out = torch.bmm(_batched(out, batch_size), _batched(t, batch_size))
    assert out is not None
    return out


def _batched(m: torch.Tensor, batch_size: int) -> torch.Tensor:
    return m if m.shape[0] == batch_size else m.expand(batch_size, 3, 3)


def chain_sizes(chain: Sequence[GeometricTransform], height: int, width: int) -> list[tuple[int, int]]:
    """Input size of every step, then the output size of the last."""
    sizes = [(height, width)]
    for step in chain:
        sizes.append(step.output_size(*sizes[-1]))
    return sizes


def _to_normalized(hw: tuple[int, int]) -> Mat:
    """Pixel coordinates -> ``grid_sample``'s normalised coordinates (align_corners=False)."""
    h, w = hw
    return mat(((2 / w, 0, -1), (0, 2 / h, -1)))


def _from_normalized(hw: tuple[int, int]) -> Mat:
    h, w = hw
    return mat(((w / 2, 0, w / 2), (0, h / 2, h / 2)))


#: pixel coordinates -> index coordinates (pixel ``i``'s centre at ``i``)
_TO_INDEX = mat(((1, 0, -0.5), (0, 1, -0.5)))


@functools.lru_cache(maxsize=64)
def fill_tensor(values: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype).to(device).view(1, -1, 1, 1)


def fill_value(fill: float | Sequence[float], device: torch.device, dtype: torch.dtype) -> float | torch.Tensor:
    """A Python float, or a cached ``(1, C, 1, 1)`` tensor for per-channel values (created once per device)."""
    if isinstance(fill, (int, float)):
        return float(fill)
    return fill_tensor(tuple(float(f) for f in fill), torch.device(device), dtype)


def _inside_weight(idx: torch.Tensor, hw: tuple[int, int]) -> torch.Tensor:
    """Bilinear weight inside an ``h x w`` image at index coordinates ``idx`` (..., 2): ``grid_sample`` of ones."""
    h, w = hw
    size = const((float(w), float(h)), idx.device, idx.dtype)
    return torch.minimum(idx + 1, size - idx).clamp_(0, 1).prod(-1).unsqueeze(1)


def warp(batch: torch.Tensor, chain: Sequence[tuple[GeometricTransform, Any]]) -> torch.Tensor:
    """Apply geometric steps ``[(step, params), ...]`` in order as one bilinear ``grid_sample``.

    Coordinates of each output pixel are mapped back through every step's inverse matrix (composed per sample
    into one 3x3 matrix). Source coordinates are clamped to the window that ``"clamp"`` steps see (a crop never
    shows pixels outside its window). Each ``"fill"`` step computes the bilinear weight of its own input's inside
    in closed form (what ``grid_sample`` of an all-ones image gives), zero-pads its input with it (``grid_sample``
    does that itself for a first step) and blends its fill value like torchvision's ``_apply_grid_transform``:
    ``mask * (x - fill) + fill``. Crop then rotate therefore equals torchvision's crop then rotate everywhere.
    """
    b, c, h, w = batch.shape
    dev = batch.device
    steps = [s for s, _ in chain]
    sizes = chain_sizes(steps, h, w)
    out_hw = sizes[-1]
    inverses = [list(s.inverse_matrix(p, *sizes[k], dev)) for k, (s, p) in enumerate(chain)]
    to_src = _to_normalized((h, w))

    # the window every sample stays in, as normalised source coordinates of its two corners
    lo = hi = None
    seen: set = set()
    prefix: list = []
    aligned = True
    for k, step in enumerate(steps):
        if step.edge == "clamp" and not aligned:
            raise ValueError(f"{step!r} clamps to a window and cannot follow a rotation in one warp")
        frame = prefix
        prefix = prefix + inverses[k]
        aligned = aligned and step.axis_aligned
        if step.edge == "clamp":
            if step.clamp_to == "output":
                frame, (hk, wk) = prefix, sizes[k + 1]
            else:
                hk, wk = sizes[k]
            key = (tuple(id(f) for f in frame), hk, wk)
            if key in seen:
                continue
            seen.add(key)
            corners = ((0.5, wk - 0.5, 0.0), (0.5, hk - 0.5, 0.0), (1.0, 1.0, 1.0))
            box = product([to_src, *frame, corners], b, dev)[:, :2, :2]
            klo, khi = box.amin(2), box.amax(2)
            lo = klo if lo is None else torch.maximum(lo, klo)
            hi = khi if hi is None else torch.minimum(hi, khi)

    # output pixel -> source (normalised) and -> each fill step's input (index coordinates): affine_grid thetas
    suffix: list = [_from_normalized(out_hw)]
    mask_thetas = []
    fills = []
    for k in reversed(range(len(steps))):
        suffix = inverses[k] + suffix
        if steps[k].edge == "fill":
            mask_thetas.append(product([_TO_INDEX, *suffix], b, dev))
            fills.append((sizes[k], steps[k].fill, k > 0))
    thetas = [product([to_src, *suffix], b, dev)] + mask_thetas[::-1]
    theta = torch.cat([_batched(t, b) for t in thetas], 0)[:, :2] if len(thetas) > 1 else _batched(thetas[0], b)[:, :2]
    x = to_float(batch)
    if theta.dtype != x.dtype:
        theta = theta.to(x.dtype)
    grids = F.affine_grid(theta, [theta.shape[0], 1, out_hw[0], out_hw[1]], align_corners=False)
    grid = grids[:b]
    if lo is not None and hi is not None:
        if lo.dtype != x.dtype:
            lo, hi = lo.to(x.dtype), hi.to(x.dtype)
        grid = torch.minimum(torch.maximum(grid, lo.view(-1, 1, 1, 2)), hi.view(-1, 1, 1, 2))
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    for i, (in_hw, fill, pad_zeros) in enumerate(reversed(fills)):
        mask = _inside_weight(grids[(i + 1) * b : (i + 2) * b], in_hw)
        f = fill_value(fill, dev, out.dtype)
        if isinstance(f, float) and f == 0.0:
            out = out * (mask * mask if pad_zeros else mask)
        else:
            out = (out * mask if pad_zeros else out).sub(f).mul_(mask).add_(f)
    return restore_dtype(out, batch.dtype)
