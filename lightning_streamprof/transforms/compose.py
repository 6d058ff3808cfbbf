"""Run batch transforms in order, merging consecutive geometric steps into one affine warp."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ._base import BatchTransform, GeometricTransform, _check_batch
from ._warp import warp

__all__ = ["Compose"]


class Compose(BatchTransform):
    """Apply ``transforms`` in order; consecutive geometric steps run as ONE ``affine_grid`` + ``grid_sample``.

    Per sample, the steps' 3x3 coordinate matrices are multiplied into one, so a crop -> resize -> rotation chain
    resamples the source once (bilinear, ``align_corners=False``) at the last step's output size. A merged chain
    differs from running the steps one by one (or torchvision's ops in sequence) because the image is interpolated
    once instead of at each step (crop 128 -> resize 256 -> rotate vs torchvision's three ops: max 2.7e-3, mean
    3.3e-5 on smooth [0, 1] images; up to 0.33 on white noise). Samples never leave a crop's window, and a rotation's
    outside is filled as torchvision fills it, so crop -> rotate equals torchvision's crop then rotate within 1e-4.
    A ``"clamp"`` step (crop, resize) after a rotation starts a new warp, as does a
    ``Resize(antialias=True)``. Set ``merge=False`` to run every step on its own.

    ``sample`` returns a tuple with one parameter set per step; a ``generator`` given here (or to ``__call__``)
    is used by every step, otherwise each step uses its own.

    Example::

        aug = Compose([ToFloat(), RandomCrop(128), Resize(256), RandomRotation(45), GaussianBlur(7),
                       Normalize((0.5,) * 3, (0.5,) * 3)], generator=torch.Generator(device="cuda").manual_seed(0))
        out = aug(images_uint8_on_cuda)
    """

    def __init__(
        self, transforms: Sequence[BatchTransform], merge: bool = True, generator: torch.Generator | None = None
    ) -> None:
        super().__init__(generator)
        self.transforms = list(transforms)
        self.merge = merge
        self._groups = self._plan() if merge else [[i] for i in range(len(self.transforms))]

    def _plan(self) -> list[list[int]]:
        groups: list[list[int]] = []
        rotated = False
        for i, t in enumerate(self.transforms):
            joinable = isinstance(t, GeometricTransform) and t.mergeable
            prev = groups[-1] if groups else None
            can_join = (
                joinable
                and prev is not None
                and isinstance(self.transforms[prev[-1]], GeometricTransform)
                and self.transforms[prev[-1]].mergeable
                and not (t.edge == "clamp" and rotated)
            )
            if can_join:
                prev.append(i)
            else:
                groups.append([i])
                rotated = False
            if joinable and not t.axis_aligned:
                rotated = True
        return groups

    @property
    def groups(self) -> list[list[BatchTransform]]:
        """The steps as they run: each inner list of two or more is one merged warp."""
        return [[self.transforms[i] for i in g] for g in self._groups]

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        for t in self.transforms:
            height, width = t.output_size(height, width)
        return height, width

    def sample(self, batch_size, height, width, device, generator=None) -> tuple[Any, ...]:
        g = self._generator(generator)
        params = []
        for t in self.transforms:
            params.append(t.sample(batch_size, height, width, device, g))
            height, width = t.output_size(height, width)
        return tuple(params)

    def apply(self, batch: torch.Tensor, params: Sequence[Any]) -> torch.Tensor:
        _check_batch(batch)
        for group in self._groups:
            if len(group) == 1:
                batch = self.transforms[group[0]].apply(batch, params[group[0]])
            else:
                batch = warp(batch, [(self.transforms[i], params[i]) for i in group])  # type: ignore[misc]
        return batch

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"Compose([{inner}], merge={self.merge})"
