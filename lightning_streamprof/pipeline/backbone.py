"""The frozen backbone: finding it, checking it, and the proxy that serves its staged output."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
from torch import nn

from lightning_streamprof.pipeline.derivation import DerivationRecorder, Recipe
from lightning_streamprof.pipeline.graph import GraphedForward


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
    """Replaces ``module.forward`` (an instance attribute, so the state dict is unchanged) and serves the staged
    output of the current training step: to a call with the staged input tensor itself, or, for an input that
    ``training_step`` derives from the batch, to the step's first call with a tensor of the staged input's
    shape, dtype and device, checked equal to the staged input on the first ``verify`` such steps (a mismatch
    stops serving, with one warning). Any other call computes normally."""

    def __init__(self, name: str, module: nn.Module, recipe: Recipe, graph: GraphedForward | None = None,
                 verify: int = 2) -> None:
        self.name = name
        self.module = module
        self.recipe = recipe
        self._original: Callable[..., Any] = module.forward
        self.graphed = graph
        self.use_graph = False  # whether ``compute`` replays the graph (auto switches it per trial)
        self.verify_left = 0 if recipe.identity else verify
        self.mismatch: str | None = None
        self.staged_input: torch.Tensor | None = None
        self.staged_output: Any = None
        self.hits = 0
        self.misses = 0
        module.forward = self._forward  # type: ignore[method-assign]

    @property
    def active(self) -> bool:
        """Whether staged outputs may still be served (no mismatch was found)."""
        return self.mismatch is None

    def compute(self, batch: Any) -> tuple[torch.Tensor, Any]:
        """The backbone's input made from a staged batch, and its output."""
        x = self.recipe(batch)
        if self.graphed is not None and self.use_graph:
            return x, self.graphed(x)
        with torch.no_grad():
            return x, self._original(x)

    def serve(self, x: torch.Tensor | None, output: Any) -> None:
        self.staged_input, self.staged_output = x, output

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        staged = self.staged_input
        if staged is not None and len(args) == 1 and not kwargs and self._matches(args[0], staged):
            out = self.staged_output
            self.staged_input = self.staged_output = None
            self.hits += 1
            return out
        self.misses += 1
        return self._original(*args, **kwargs)

    def _matches(self, x: Any, staged: torch.Tensor) -> bool:
        if x is staged:
            return True
        if self.recipe.identity or not isinstance(x, torch.Tensor):
            return False
        if x.shape != staged.shape or x.dtype != staged.dtype or x.device != staged.device:
            return False
        if self.verify_left > 0:
            if not torch.equal(x, staged):
                self.mismatch = (f"the staged input ({self.recipe.describe()} of the batch) differs from the"
                                 f" {_describe(x)} tensor `training_step` passes")
                self.staged_input = self.staged_output = None
                warnings.warn(f"StreamPipeline: backbone {self.name!r}: {self.mismatch}; it runs in the step from"
                              " now on. Pass `backbone_input=` (a function of the batch) or move the conversion"
                              " into `on_after_batch_transfer`.", stacklevel=3)
                return False
            self.verify_left -= 1
        return True

    def remove(self) -> None:
        if self.module.__dict__.get("forward") == self._forward:
            del self.module.forward
        self.staged_input = self.staged_output = None


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


def batch_tensors(batch: Any) -> list[tuple[torch.Tensor, Callable[[Any], torch.Tensor]]]:
    """Each tensor of a batch (a tensor, a sequence or a mapping of them) with a getter for its position."""
    if isinstance(batch, torch.Tensor):
        return [(batch, lambda b: b)]
    if isinstance(batch, (list, tuple)):
        return [(t, lambda b, i=i: b[i]) for i, t in enumerate(batch) if isinstance(t, torch.Tensor)]
    if isinstance(batch, dict):
        return [(t, lambda b, k=k: b[k]) for k, t in batch.items() if isinstance(t, torch.Tensor)]
    return []


def _describe(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"


class BackboneProbe:
    """Watches the first training step: which of ``candidates`` (frozen modules) is called with a tensor made
    from the batch, and how that tensor was made (:class:`DerivationRecorder`).

    ``found`` is ``(name, module, recipe)`` for the first candidate called with a stageable tensor; ``refusals``
    say, per candidate, why the tensor it was called with cannot be staged.
    """

    def __init__(self, candidates: list[tuple[str, nn.Module]]) -> None:
        self.candidates = candidates
        self.found: tuple[str, nn.Module, Recipe] | None = None
        self.refusals: dict[str, str] = {}
        self._recorder: DerivationRecorder | None = None
        self._handles: list[Any] = []

    @property
    def watching(self) -> bool:
        return self._recorder is not None

    def start(self, batch: Any) -> None:
        self._recorder = DerivationRecorder(batch_tensors(batch))
        for name, module in self.candidates:
            self._handles.append(module.register_forward_pre_hook(lambda m, a, name=name: self._called(name, m, a)))
            self._handles.append(module.register_forward_hook(self._returned, always_call=True))
        self._recorder.__enter__()

    def stop(self) -> None:
        recorder, self._recorder = self._recorder, None
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if recorder is not None:
            recorder.__exit__(None, None, None)
            recorder.close()

    def _called(self, name: str, module: nn.Module, args: tuple) -> None:
        recorder = self._recorder
        if recorder is None:
            return
        if recorder.paused == 0 and self.found is None and name not in self.refusals:
            self._judge(name, module, args[0] if args else None, recorder)
        recorder.paused += 1  # the module's own operations are not followed

    def _returned(self, module: nn.Module, args: tuple, output: Any) -> None:
        if self._recorder is not None:
            self._recorder.paused = max(0, self._recorder.paused - 1)

    def _judge(self, name: str, module: nn.Module, x: Any, recorder: DerivationRecorder) -> None:
        d = recorder.lookup(x)
        if d is not None and d.recipe is not None:
            self.found = (name, module, d.recipe)
        elif d is not None:
            self.refusals[name] = (
                f"called with {_describe(d.tensor)} made from the batch's {_describe(d.source)} tensor in"
                f" `training_step` by `{d.blocker}`, which cannot be staged")
        elif isinstance(x, torch.Tensor):
            self.refusals[name] = f"called with {_describe(x)}, a tensor not made from the batch"
        else:
            self.refusals[name] = "not called with a tensor"
