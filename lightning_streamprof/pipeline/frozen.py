"""Frozen modules of a LightningModule: finding them, checking them, the methods they may be called through,
and replacing one of those methods on an instance (and putting it back exactly)."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable

from torch import nn

try:  # the wrapper ``torch.compile(module)`` returns
    from torch._dynamo.eval_frame import OptimizedModule
except Exception:  # noqa: BLE001 - torch without dynamo
    OptimizedModule = ()  # type: ignore[assignment,misc]

_MISSING = object()
#: public methods of these classes are not calls of a model (utilities, loading, generation)
_BASE_MODULES = (nn.Module,)


def is_frozen(module: nn.Module) -> bool:
    """Has parameters and none of them is trainable."""
    params = list(module.parameters())
    return bool(params) and not any(p.requires_grad for p in params)


def sharded(module: nn.Module) -> str | None:
    """Why a module's weights are split across ranks (FSDP, FSDP2, tensor parallel), or ``None``: its forward then
    gathers them in collectives, which every rank must issue in the same order."""
    try:
        from torch.distributed.tensor import DTensor
    except Exception:  # noqa: BLE001 - torch without distributed tensors
        DTensor = ()  # type: ignore[assignment,misc]
    for p in module.parameters():
        if DTensor and isinstance(p, DTensor):
            return "its weights are DTensors (FSDP2 or tensor parallel)"
        if getattr(p, "_fsdp_flattened", False):
            return "its weights are sharded by FSDP"
    return None


def unwrap(module: nn.Module) -> nn.Module:
    """The module a ``torch.compile`` wrapper holds (the module itself otherwise)."""
    while isinstance(module, OptimizedModule):
        module = module._orig_mod
    return module


def frozen_modules(root: nn.Module) -> list[tuple[str, nn.Module]]:
    """The largest frozen submodules at any depth (a frozen module's own children are part of it); nothing
    inside a ``torch.compile`` wrapper other than the wrapper."""
    out: list[tuple[str, nn.Module]] = []

    def walk(prefix: str, module: nn.Module) -> None:
        for name, child in module.named_children():
            full = f"{prefix}.{name}" if prefix else name
            if is_frozen(child):
                out.append((full, child))
            elif not isinstance(child, OptimizedModule):
                walk(full, child)

    walk("", root)
    return out


def inner_frozen(name: str, module: nn.Module) -> list[tuple[str, nn.Module]]:
    """A frozen module and every submodule of it with parameters (each may be called from the step), but not
    the inside of a ``torch.compile`` wrapper (its frames belong to the compiler)."""
    out = [(name, module)]
    if not isinstance(module, OptimizedModule):
        for child_name, child in module.named_children():
            if any(True for _ in child.parameters()):
                out += inner_frozen(f"{name}.{child_name}", child)
    return out


def resolve(root: nn.Module, spec: str | nn.Module) -> tuple[str, nn.Module]:
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


def call_methods(module: nn.Module) -> list[str]:
    """``forward`` and the public methods that the module's own classes define (``forward_features``,
    ``encode``, ``get_image_features``, ...): the ways a step may call it. Class and static methods,
    properties and ``nn.Module``'s own methods are left out."""
    names = ["forward"]
    for klass in type(unwrap(module)).__mro__:
        if not issubclass(klass, nn.Module) or klass in _BASE_MODULES:
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and inspect.isfunction(value) and name not in names:
                names.append(name)
    return names


def _owner(module: nn.Module, name: str) -> Any:
    """The object whose ``__dict__`` an attribute set on ``module`` lands in (a compile wrapper passes
    everything but its own attributes to the module it holds)."""
    if isinstance(module, OptimizedModule) and not hasattr(type(module), name) \
            and name not in OptimizedModule._opt_mod_attributes:
        return _owner(module._orig_mod, name)
    return module


class Patch:
    """``module.<name>`` replaced by ``make(original)`` on the instance; :meth:`undo` restores exactly what the
    instance had (an instance attribute of its own, such as a compile wrapper's ``forward``, included)."""

    def __init__(self, module: nn.Module, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        self.module, self.name = module, name
        self.original: Callable[..., Any] = getattr(module, name)
        self._owner = _owner(module, name)
        self._saved = self._owner.__dict__.get(name, _MISSING)
        self.replacement = make(self.original)
        self._owner.__dict__[name] = self.replacement

    def undo(self) -> None:
        if self._owner.__dict__.get(self.name) is not self.replacement:
            return  # replaced again by someone else: theirs stays
        if self._saved is _MISSING:
            del self._owner.__dict__[self.name]
        else:
            self._owner.__dict__[self.name] = self._saved


def undo_all(patches: Iterable[Patch]) -> None:
    for patch in reversed(list(patches)):
        patch.undo()
