"""Tensors inside the structures that models take and return: tensors, sequences, mappings (``dict``,
``UserDict`` such as ``BatchEncoding``, ``ModelOutput``), dataclasses and plain objects holding tensors
(diffusers' ``DiagonalGaussianDistribution``), each tensor with the path that reaches it.

:func:`flatten` splits a structure into a :class:`Spec` and its leaves; ``spec.unflatten(leaves)`` builds the
same type again (a copy of the container, the original left alone). Two specs compare equal when the
structures have the same types, keys and non-tensor leaf positions.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, Iterator

import torch
from torch import nn

#: a path step: ("item", key or index) or ("attr", name)
PathStep = tuple[str, Any]
Path = tuple[PathStep, ...]
_MAX_DEPTH = 8
_ATOMS = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device, torch.memory_format)


def _children(obj: Any) -> list[tuple[PathStep, Any]] | None:
    """The items of a container (``None`` for a leaf)."""
    if isinstance(obj, (torch.Tensor, *_ATOMS)):
        return None
    if isinstance(obj, Mapping):
        return [(("item", k), v) for k, v in obj.items()]
    if isinstance(obj, (list, tuple)):
        return [(("item", i), v) for i, v in enumerate(obj)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(("attr", f.name), getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    if _plain_object(obj):
        return [(("attr", k), v) for k, v in vars(obj).items() if _holds_tensor(v, 1)]
    return None


def _plain_object(obj: Any) -> bool:
    return (hasattr(obj, "__dict__") and not isinstance(obj, (nn.Module, type)) and not callable(obj)
            and type(obj).__module__ != "builtins")


def _holds_tensor(obj: Any, depth: int) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    if depth > _MAX_DEPTH:
        return False
    items = _children(obj)
    return bool(items) and any(_holds_tensor(v, depth + 1) for _, v in items)


def leaves_with_paths(obj: Any) -> list[tuple[Path, torch.Tensor]]:
    """Every tensor reachable in ``obj`` with its path, depth first."""
    out: list[tuple[Path, torch.Tensor]] = []
    _walk(obj, (), 0, out)
    return out


def _walk(obj: Any, path: Path, depth: int, out: list[tuple[Path, torch.Tensor]]) -> None:
    # a module-level function, not a recursive closure: a closure that calls itself is a reference cycle, and
    # every tensor it collected would live until the garbage collector ran (GPU memory held for many steps)
    if isinstance(obj, torch.Tensor):
        out.append((path, obj))
        return
    if depth > _MAX_DEPTH:
        return
    for step, v in _children(obj) or ():
        _walk(v, path + (step,), depth + 1, out)


def tensors(obj: Any) -> list[torch.Tensor]:
    return [t for _, t in leaves_with_paths(obj)]


def follow(obj: Any, path: Path) -> Any:
    """The value at ``path`` in ``obj``."""
    for kind, key in path:
        obj = obj[key] if kind == "item" else getattr(obj, key)
    return obj


def describe_path(root: str, path: Path) -> str:
    """``batch['image']``, ``batch[0]``, ``out.latent_dist.mean``."""
    text = root
    for kind, key in path:
        text += f"[{key!r}]" if kind == "item" else f".{key}"
    return text


@dataclasses.dataclass(frozen=True, eq=False)
class Spec:
    """The shape of a structure: ``kind`` is ``"tensor"``, ``"leaf"`` (any other value), ``"tuple"``,
    ``"list"``, ``"map"``, ``"fields"`` (a dataclass) or ``"attrs"`` (a plain object); ``keys`` name the
    children of a container; ``template`` is the original container, copied to rebuild it."""

    kind: str
    type: type
    keys: tuple = ()
    children: tuple[Spec, ...] = ()
    template: Any = None

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Spec) and self.kind == other.kind and self.type is other.type
                and self.keys == other.keys and self.children == other.children)

    def __hash__(self) -> int:
        return hash((self.kind, self.type, self.keys, self.children))

    def unflatten(self, leaves: list[Any]) -> Any:
        it = iter(leaves)
        return self._build(it)

    def _build(self, it: Iterator[Any]) -> Any:
        if self.kind in ("tensor", "leaf"):
            return next(it)
        values = [c._build(it) for c in self.children]
        if self.kind == "tuple":
            return self.type(*values) if hasattr(self.type, "_fields") else self.type(values)
        if self.kind == "list":
            return values if self.type is list else self.type(values)
        new = copy.copy(self.template)
        if self.kind == "map":
            for k, v in zip(self.keys, values):
                new[k] = v
        else:
            for k, v in zip(self.keys, values):
                object.__setattr__(new, k, v)
        return new


def flatten(obj: Any) -> tuple[Spec, list[Any]]:
    """``obj`` as a spec and its leaves (tensors and other values), in the order ``Spec.unflatten`` takes."""
    leaves: list[Any] = []
    return _flatten(obj, leaves, 0), leaves


def _flatten(obj: Any, leaves: list[Any], depth: int) -> Spec:
    if isinstance(obj, torch.Tensor):
        leaves.append(obj)
        return Spec("tensor", torch.Tensor)
    items = _children(obj) if depth <= _MAX_DEPTH else None
    if items is None or (not items and not isinstance(obj, (list, tuple, Mapping))):
        leaves.append(obj)
        return Spec("leaf", object)
    keys = tuple(k for (_, k), _ in items)
    children = tuple(_flatten(v, leaves, depth + 1) for _, v in items)
    if isinstance(obj, tuple):
        return Spec("tuple", type(obj), keys, children)
    if isinstance(obj, list):
        return Spec("list", type(obj), keys, children)
    kind = "map" if isinstance(obj, Mapping) else "fields" if dataclasses.is_dataclass(obj) else "attrs"
    return Spec(kind, type(obj), keys, children, obj)


def map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], obj: Any) -> Any:
    """The same structure (a new container of the same type) with ``fn`` applied to each tensor."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    spec, leaves = flatten(obj)
    if not any(isinstance(v, torch.Tensor) for v in leaves):
        return obj
    return spec.unflatten([fn(v) if isinstance(v, torch.Tensor) else v for v in leaves])
