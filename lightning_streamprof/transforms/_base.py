"""Base classes: a batch transform samples parameters for the whole batch, then applies them in one call."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BatchTransform", "GeometricTransform", "to_float", "restore_dtype"]


class BatchTransform:
    """A callable on ``(B, C, H, W)`` batches: ``transform(batch) == transform.apply(batch, transform.sample(...))``.

    ``sample`` draws every random parameter for the batch on ``device`` (no host synchronisation);
    ``apply`` uses only tensor ops on the batch's device. A ``torch.Generator`` given to the constructor
    or to ``sample`` makes the draw repeatable; it must live on the batch's device (a CUDA generator,
    ``torch.Generator(device="cuda")``, for CUDA batches). Without one, the global RNG of that device is used.
    """

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """Spatial size of the output for an input of ``height`` x ``width``."""
        return height, width

    def sample(
        self,
        batch_size: int,
        height: int,
        width: int,
        device: torch.device | str,
        generator: torch.Generator | None = None,
    ) -> Any:
        """Parameters for a batch (``None`` for deterministic transforms)."""
        return None

    def apply(self, batch: torch.Tensor, params: Any) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, batch: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        _check_batch(batch)
        b, _, h, w = batch.shape
        return self.apply(batch, self.sample(b, h, w, batch.device, generator))

    def _generator(self, generator: torch.Generator | None) -> torch.Generator | None:
        return generator if generator is not None else self.generator

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k != "generator")
        return f"{type(self).__name__}({fields})"


class GeometricTransform(BatchTransform):
    """A transform that is a per-sample affine map of pixel coordinates, so that chains of them merge into one warp.

    Pixel coordinates are continuous with pixel ``i`` covering ``[i, i + 1)``, its centre at ``i + 0.5``
    (``grid_sample``'s ``align_corners=False`` convention).
    Subclasses set ``edge``: ``"clamp"`` (samples stay inside the input, edge pixels repeat, like
    ``F.interpolate``) or ``"fill"`` (outside the input is ``fill``, blended like torchvision's ``rotate``),
    ``clamp_to`` (``"input"``: sample within the input's pixel centres, like a resize; ``"output"``: within the
    output window, like a crop) and ``axis_aligned`` (the map is a scale and translation only).
    """

    edge: str = "clamp"
    axis_aligned: bool = True
    fill: float | tuple[float, ...] | None = None
    mergeable: bool = True
    clamp_to: str = "input"

    def inverse_matrix(self, params: Any, height: int, width: int, device: torch.device) -> list:
        """Factors whose product maps output to input pixel coordinates, as 3x3 per sample.

        Each factor is a ``(B, 3, 3)`` float32 tensor on ``device`` or a constant 3x3 matrix as nested tuples
        (``_warp.mat``); constants are multiplied on the host, so they cost no device work.
        """
        raise NotImplementedError

    def apply(self, batch: torch.Tensor, params: Any) -> torch.Tensor:
        from ._warp import warp

        return warp(batch, [(self, params)])


def _check_batch(batch: torch.Tensor) -> None:
    if batch.dim() != 4:
        raise ValueError(f"expected a (B, C, H, W) batch, got shape {tuple(batch.shape)}")


def to_float(batch: torch.Tensor) -> torch.Tensor:
    """The batch itself if floating point, else converted to float32 without rescaling."""
    return batch if batch.is_floating_point() else batch.to(torch.float32)


def restore_dtype(out: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round and clamp back to an integer ``dtype`` (as torchvision does for uint8 images); float passes through."""
    if out.dtype == dtype:
        return out
    if dtype.is_floating_point:
        return out.to(dtype)
    info = torch.iinfo(dtype)
    return out.round_().clamp_(info.min, info.max).to(dtype)
