"""What Python holds on a device when it runs out of memory, at no cost before: the module's parameters, gradients
and buffers, the optimizers' state, and the other tensors that live Python objects reference (found by walking the
garbage collector's objects once, at the error), each storage counted once; what the allocator has beyond them is
held outside Python (autograd's saved activations, the caches of libraries).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from lightning_streamprof.words import byte_size

#: the largest other tensors named
LARGEST = 3


@dataclass
class HeldTensors:
    """Bytes per kind (``parameters``, ``gradients``, ``buffers``, ``optimizer state``, ``other tensors``) and the
    largest other tensors as ``(bytes, dtype, shape)``."""

    kinds: dict[str, int] = field(default_factory=dict)
    largest: list[tuple[int, str, tuple[int, ...]]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def describe(self, allocated: int | None = None) -> str:
        """``parameters 1.2 GiB, gradients 1.2 GiB, ...; largest other tensors: ...; 3.1 GiB held outside Python``
        (the last part when ``allocated``, the allocator's bytes, is given)."""
        parts = [f"{kind} {byte_size(n)}" for kind, n in self.kinds.items() if n]
        text = ", ".join(parts) if parts else "no tensor that Python holds"
        if self.largest:
            text += "; largest other tensors: " + ", ".join(f"{byte_size(n)} {dtype}{list(shape)}"
                                                           for n, dtype, shape in self.largest)
        if allocated is not None and allocated > self.total:
            text += f"; {byte_size(allocated - self.total)} held outside Python (autograd's saved tensors, caches)"
        return text


def held_tensors(module: Any, optimizers: Iterable[Any], device_type: str = "cuda",
                 objects: Iterable[Any] | None = None) -> HeldTensors:
    """The tensors on ``device_type`` that ``module`` (its parameters, their gradients and its buffers),
    ``optimizers`` (their state) and the other live ``objects`` (default: the garbage collector's) hold, each
    storage counted once under the first kind that holds it."""
    seen: set[int] = set()
    held = HeldTensors()

    def count(kind: str, tensors: Iterable[Any]) -> None:
        total = 0
        for t in tensors:
            size = _new_storage(t, device_type, seen)
            if size:
                total += size
                if kind == "other tensors":
                    held.largest.append((size, str(t.dtype).removeprefix("torch."), tuple(t.shape)))
        held.kinds[kind] = held.kinds.get(kind, 0) + total

    params = list(module.parameters()) if module is not None and hasattr(module, "parameters") else []
    count("parameters", params)
    count("gradients", (p.grad for p in params if p.grad is not None))
    count("buffers", module.buffers() if module is not None and hasattr(module, "buffers") else [])
    count("optimizer state", (v for opt in optimizers for state in getattr(opt, "state", {}).values()
                              if isinstance(state, dict) for v in state.values()))
    count("other tensors", objects if objects is not None else _live_tensors())
    held.largest = sorted(held.largest, key=lambda r: -r[0])[:LARGEST]
    return held


def _new_storage(t: Any, device_type: str, seen: set[int]) -> int:
    """The bytes of ``t``'s storage when it is a tensor on ``device_type`` whose storage is not ``seen`` yet."""
    if not isinstance(t, torch.Tensor) or t.device.type != device_type:
        return 0
    try:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        size = storage.nbytes()
    except Exception:  # noqa: BLE001 - a tensor without storage (a fake or a meta one) holds no memory
        return 0
    if key in seen or size == 0:
        return 0
    seen.add(key)
    return size


def _live_tensors() -> Iterable[Any]:
    """The tensors among the garbage collector's objects (by their type: ``isinstance`` would ask proxies, which may
    warn, for their ``__class__``)."""
    tensor = torch.Tensor
    return [obj for obj in gc.get_objects() if issubclass(type(obj), tensor)]
