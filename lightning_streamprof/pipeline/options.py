"""StreamPipeline's arguments, checked once, when the callback is made (the defaults are its signature's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch
from torch import nn

from lightning_streamprof.pipeline.auto import check_count, check_schedule

Mode = Literal["auto", "on", "off"]
BackboneSpec = str | nn.Module
Backbone = BackboneSpec | list[BackboneSpec] | tuple[BackboneSpec, ...] | None | Literal[False]


def backbone_specs(backbone: Backbone) -> list[BackboneSpec] | None:
    """The named frozen modules (``None``: find them; ``[]``: none)."""
    if backbone is None:
        return None
    if backbone is False:
        return []
    specs = list(backbone) if isinstance(backbone, (list, tuple)) else [backbone]
    if not specs or not all(isinstance(s, (str, nn.Module)) for s in specs):
        raise ValueError(f"StreamPipeline: `backbone` must be a submodule name, a module, a list of them, None or"
                         f" False, got {backbone!r}")
    return specs


@dataclass(frozen=True)
class Options:
    """The arguments of :class:`~lightning_streamprof.StreamPipeline`, as its docstring describes them."""

    backbone: Backbone
    augment: Callable[[torch.Tensor], torch.Tensor] | None
    mode: Mode
    backbone_input: Callable[[Any], torch.Tensor] | None
    pin_memory: bool
    depth: int
    cuda_graph: bool | None
    staging_thread: bool | None
    warmup: int
    trial: int
    recheck: int

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "on", "off"):
            raise ValueError(f"StreamPipeline: `mode` must be 'auto', 'on' or 'off', got {self.mode!r}")
        if self.augment is not None and not callable(self.augment):
            raise ValueError(f"StreamPipeline: `augment` must be callable, got {self.augment!r}")
        if self.backbone_input is not None and not callable(self.backbone_input):
            raise ValueError(f"StreamPipeline: `backbone_input` must be callable, got {self.backbone_input!r}")
        specs = self.specs
        if self.backbone_input is not None and (specs is None or len(specs) != 1):
            raise ValueError("StreamPipeline: `backbone_input` needs one `backbone` (the module it is the input of)")
        check_schedule(self.warmup, self.trial, self.recheck)
        check_count("depth", self.depth, 1)

    @property
    def specs(self) -> list[BackboneSpec] | None:
        """The named frozen modules (``None``: find them; ``[]``: none)."""
        return backbone_specs(self.backbone)
