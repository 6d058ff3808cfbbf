"""The frozen backbone: finding it, checking it, and the proxy that serves its staged output."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn


def resolve_backbone(root: nn.Module, spec: str | nn.Module) -> tuple[str, nn.Module]:
    """``(dotted name, module)`` for a dotted path below ``root`` or a submodule object."""
    if isinstance(spec, nn.Module):
        for name, module in root.named_modules():
            if module is spec and name:
                return name, module
        raise ValueError("StreamPipeline: `backbone` is not a submodule of the LightningModule")
    try:
        return spec, root.get_submodule(spec)
    except AttributeError:
        raise ValueError(f"StreamPipeline: the LightningModule has no submodule {spec!r} (`backbone`)") from None


def check_frozen(name: str, module: nn.Module) -> None:
    trainable = [n for n, p in module.named_parameters() if p.requires_grad]
    if trainable:
        shown = ", ".join(trainable[:3]) + (", ..." if len(trainable) > 3 else "")
        raise ValueError(
            f"StreamPipeline: backbone {name!r} has trainable parameters ({shown}); running it ahead would use"
            f" stale weights. Freeze it (`requires_grad_(False)`) or pass `backbone=None`."
        )


def frozen_children(root: nn.Module) -> list[tuple[str, nn.Module]]:
    """Direct children that have parameters and none of them trainable."""
    out = []
    for name, child in root.named_children():
        params = list(child.parameters())
        if params and not any(p.requires_grad for p in params):
            out.append((name, child))
    return out


class BackboneProxy:
    """Replaces ``module.forward`` (an instance attribute, so the state dict is unchanged): a call with the
    staged input tensor returns the staged output, any other call computes normally."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self._original: Callable[..., Any] = module.forward
        self.staged_input: torch.Tensor | None = None
        self.staged_output: Any = None
        self.hits = 0
        self.misses = 0
        module.forward = self._forward  # type: ignore[method-assign]

    def compute(self, x: torch.Tensor) -> Any:
        with torch.no_grad():
            return self._original(x)

    def serve(self, x: torch.Tensor | None, output: Any) -> None:
        self.staged_input, self.staged_output = x, output

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and self.staged_input is not None and args[0] is self.staged_input:
            out = self.staged_output
            self.staged_input = self.staged_output = None
            self.hits += 1
            return out
        self.misses += 1
        return self._original(*args, **kwargs)

    def remove(self) -> None:
        if self.module.__dict__.get("forward") == self._forward:
            del self.module.forward
        self.staged_input = self.staged_output = None


def find_batch_input(batch: Any, tensor: torch.Tensor) -> Callable[[Any], torch.Tensor] | None:
    """A getter for the position of ``tensor`` inside ``batch`` (tensor, sequence or mapping)."""
    if batch is tensor:
        return lambda b: b
    if isinstance(batch, (list, tuple)):
        for i, item in enumerate(batch):
            if item is tensor:
                return lambda b, i=i: b[i]
    if isinstance(batch, dict):
        for key, item in batch.items():
            if item is tensor:
                return lambda b, key=key: b[key]
    return None


def default_batch_input(batch: Any) -> torch.Tensor:
    """The first tensor of a batch: the tensor itself, ``batch[0]`` or the first tensor value of a dict."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0]
    if isinstance(batch, dict):
        for value in batch.values():
            if isinstance(value, torch.Tensor):
                return value
    raise ValueError("StreamPipeline: cannot tell which tensor of the batch the backbone takes; pass `backbone_input`")
