"""How a tensor was made from the batch inside ``training_step``: recorded once, replayed on staged batches.

:class:`DerivationRecorder` is a ``TorchFunctionMode`` active during the first training step. It follows every
tensor made from a tensor of the batch; a tensor made only by the derivations that can be staged (dtype
conversion, scaling and normalisation by constants, memory format, ``contiguous``, ``clone``) carries a
:class:`Recipe` that replays those operations (out of place) on a later batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

#: operations that may appear in a staged derivation; the others' names are given in the warning
_STAGEABLE = frozenset({
    "float", "half", "bfloat16", "double", "to", "type", "contiguous", "clone",
    "div", "div_", "true_divide", "true_divide_", "__truediv__", "__itruediv__",
    "mul", "mul_", "__mul__", "__rmul__", "__imul__",
    "sub", "sub_", "__sub__", "__rsub__", "__isub__",
    "add", "add_", "__add__", "__radd__", "__iadd__",
})
_IN_PLACE_DUNDER = {"__itruediv__": "__truediv__", "__imul__": "__mul__", "__isub__": "__sub__", "__iadd__": "__add__"}
_MARK = object()  # where the derived tensor goes in a recorded call


def _out_of_place(func: Callable[..., Any]) -> Callable[..., Any]:
    """The out-of-place form of an in-place operation (staging never changes the batch it reads)."""
    name = getattr(func, "__name__", "")
    if name in _IN_PLACE_DUNDER:
        return getattr(torch.Tensor, _IN_PLACE_DUNDER[name])
    if name.endswith("_") and not name.endswith("__") and hasattr(torch.Tensor, name[:-1]):
        return getattr(torch.Tensor, name[:-1])
    return func


@dataclass(frozen=True)
class Step:
    func: Callable[..., Any]
    args: tuple
    kwargs: dict

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        args = tuple(x if a is _MARK else a for a in self.args)
        return self.func(*args, **self.kwargs)

    @property
    def name(self) -> str:
        return getattr(self.func, "__name__", repr(self.func))


@dataclass(frozen=True)
class Recipe:
    """``getter(batch)`` then ``steps``: the backbone's input made from a batch."""

    getter: Callable[[Any], torch.Tensor]
    steps: tuple[Step, ...] = ()
    from_user: bool = False  # ``backbone_input=``: the step may make its own copy of the same values

    def __call__(self, batch: Any) -> torch.Tensor:
        x = self.getter(batch)
        for step in self.steps:
            x = step.apply(x)
        return x

    @property
    def identity(self) -> bool:
        """Whether the backbone takes a tensor of the batch itself (matched by identity, never compared)."""
        return not self.steps and not self.from_user

    def describe(self) -> str:
        if self.from_user:
            return "`backbone_input`"
        return ".".join(s.name.strip("_") for s in self.steps) or "the batch tensor itself"


@dataclass
class Derived:
    """A tensor made from the batch: its recipe while stageable, else the first operation that is not."""

    tensor: torch.Tensor
    source: torch.Tensor
    recipe: Recipe | None
    blocker: str | None = None


class DerivationRecorder(TorchFunctionMode):
    """Follows the tensors made from ``roots`` (batch tensor -> getter) while it is active.

    Strong references to the followed tensors are kept until :meth:`close` (one step), so that the ids it
    looks them up by stay valid. ``paused`` stops following (inside a backbone's own forward).
    """

    def __init__(self, roots: list[tuple[torch.Tensor, Callable[[Any], torch.Tensor]]]) -> None:
        super().__init__()
        self.known: dict[int, Derived] = {id(t): Derived(t, t, Recipe(g)) for t, g in roots}
        self.paused = 0

    def lookup(self, tensor: Any) -> Derived | None:
        d = self.known.get(id(tensor)) if isinstance(tensor, torch.Tensor) else None
        return d if d is not None and d.tensor is tensor else None

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's signature
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused or not isinstance(out, torch.Tensor):
            return out
        parents = [(i, d) for i, a in enumerate(args) if (d := self.lookup(a)) is not None]
        derived_kwargs = any(self.lookup(v) is not None for v in kwargs.values())
        if not parents and not derived_kwargs:
            return out
        name = getattr(func, "__name__", str(func))
        if parents:
            index, parent = parents[0]
        else:
            index, parent = -1, next(self.lookup(v) for v in kwargs.values() if self.lookup(v) is not None)
        recipe, blocker = None, parent.blocker
        if parent.recipe is not None:
            if len(parents) == 1 and not derived_kwargs and name in _STAGEABLE and index >= 0 and out.device == parent.tensor.device:
                call = tuple(_MARK if i == index else a for i, a in enumerate(args))
                recipe = Recipe(parent.recipe.getter, parent.recipe.steps + (Step(_out_of_place(func), call, dict(kwargs)),))
            else:
                blocker = name
        self.known[id(out)] = Derived(out, parent.source, recipe, blocker)
        return out

    def close(self) -> None:
        self.known.clear()
