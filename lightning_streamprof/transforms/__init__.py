"""Batch image transforms with per-sample randomness, run entirely on the batch's device.

Each transform draws its random parameters for the whole batch on the device (``sample``), then applies them in
one vectorised call (``apply``); nothing waits for the device. :class:`Compose` merges consecutive geometric steps
(crop, resize, rotation) into one affine warp.
"""

from ._base import BatchTransform, GeometricTransform
from ._params import BlurParams, CropParams, RotationParams
from ._warp import warp
from .blur import GaussianBlur
from .color import Normalize, ToFloat
from .compose import Compose
from .geometric import RandomCrop, RandomRotation, Resize

__all__ = [
    "BatchTransform",
    "BlurParams",
    "Compose",
    "CropParams",
    "GaussianBlur",
    "GeometricTransform",
    "Normalize",
    "RandomCrop",
    "RandomRotation",
    "Resize",
    "RotationParams",
    "ToFloat",
    "warp",
]
