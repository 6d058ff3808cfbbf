"""How ``training_step`` makes the arguments of frozen calls: recorded once, replayed on staged batches.

:class:`DerivationRecorder` is a ``TorchFunctionMode`` active during the first training step. Every tensor that
step makes gets an expression (:class:`Expr`) while it is made by deterministic operations (dtype and memory
format conversions, arithmetic, comparisons, indexing and reshaping, interpolation, deterministic factories such
as ``arange``) from the batch's tensors, from outputs of staged frozen calls and from constants (tensors that
existed before the step, such as buffers); anything else (a random draw, trainable weights, an in-place write
through indexing) blocks it, and the blocking operation's name is kept for the warning. Expressions replay
their operations out of place on a later batch, under the autocast state they were recorded in.

Tensors are held weakly (by ``id`` with a weak reference), so the step's memory is not kept alive.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from lightning_streamprof.pipeline import pytree

#: what blocks a tensor made with trainable weights (it needs this step's weights)
TRAINABLE = "the trainable weights"
_ARITH = ("add", "sub", "mul", "div", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
          "lshift", "rshift")
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge", "neg", "pos", "abs", "invert", "getitem")
#: operations that may appear in a replayed derivation (in-place forms are replayed out of place)
REPLAYABLE = frozenset({
    # dtype, device and memory format
    "float", "half", "bfloat16", "double", "int", "long", "short", "bool", "byte", "char", "to", "type",
    "type_as", "contiguous", "clone", "detach", "data", "T", "mT", "cuda", "cpu",
    # arithmetic and elementwise functions
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "remainder",
    "fmod", "neg", "negative", "pow", "rsub", "abs", "clamp", "clamp_min", "clamp_max", "clip", "sqrt", "rsqrt",
    "exp", "log", "log1p", "log2", "log10", "sigmoid", "tanh", "reciprocal", "square", "round", "floor", "ceil",
    "trunc", "sign", "lerp", "addcmul", "addcdiv", "matmul", "mm", "bmm", "einsum", "maximum", "minimum",
    # comparisons, masks and logic
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_not", "where", "masked_fill", "isfinite", "isnan", "nan_to_num",
    # indexing and shapes
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "swapaxes", "t", "flatten", "unflatten",
    "squeeze", "unsqueeze", "expand", "expand_as", "repeat", "repeat_interleave", "narrow", "select",
    "index_select", "gather", "cat", "concat", "concatenate", "stack", "movedim", "moveaxis", "flip", "fliplr",
    "flipud", "roll", "rot90", "chunk", "split", "unbind", "tile",
    # functions of torch.nn.functional without randomness, and reductions
    "interpolate", "upsample", "pad", "normalize", "one_hot", "softmax", "log_softmax", "layer_norm",
    "avg_pool2d", "max_pool2d", "adaptive_avg_pool2d", "grid_sample", "affine_grid", "embedding",
    "mean", "sum", "amax", "amin", "max", "min", "std", "var", "norm", "argmax", "argmin", "cumsum", "prod",
    "any", "all", "sort", "topk",
    # deterministic factories
    "zeros", "ones", "full", "arange", "linspace", "logspace", "eye", "tensor", "as_tensor", "zeros_like",
    "ones_like", "full_like", "scalar_tensor",
} | {f"{p}{b}" for b in _ARITH for p in ("", "r", "i")} | set(_COMPARE))


def op_name(func: Callable[..., Any]) -> str:
    """The operation's name without dunder marks and in-place suffix: ``__rtruediv__`` -> ``rtruediv``,
    ``div_`` -> ``div``; a property getter (``Tensor.data``) by the property's name."""
    name = getattr(func, "__name__", None) or repr(func)
    if name == "__get__":
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    if name.startswith("__") and name.endswith("__"):
        return name[2:-2]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


_IN_PLACE_DUNDER = {"__itruediv__": "__truediv__", "__imul__": "__mul__", "__isub__": "__sub__",
                    "__iadd__": "__add__", "__ifloordiv__": "__floordiv__", "__ipow__": "__pow__",
                    "__iand__": "__and__", "__ior__": "__or__", "__ixor__": "__xor__"}


def _out_of_place(func: Callable[..., Any]) -> Callable[..., Any]:
    """The out-of-place form of an in-place operation (a replay never changes the batch it reads)."""
    name = getattr(func, "__name__", "")
    if name in _IN_PLACE_DUNDER:
        return getattr(torch.Tensor, _IN_PLACE_DUNDER[name])
    if name.endswith("_") and not name.endswith("__") and hasattr(torch.Tensor, name[:-1]):
        return getattr(torch.Tensor, name[:-1])
    return func


def amp_state(device_type: str) -> tuple[str, bool, torch.dtype]:
    """The autocast state in force for a device type."""
    return device_type, torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


def autocast_as(state: tuple[str, bool, torch.dtype] | None) -> contextlib.AbstractContextManager:
    """The recorded autocast state again (nothing to do when it is the current one). The weight-cast cache is
    off, as CUDA graph capture needs."""
    if state is None or amp_state(state[0]) == state:
        return contextlib.nullcontext()
    device_type, enabled, dtype = state
    return torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=False)


# ---------------------------------------------------------------- expressions


class Expr:
    """A recipe for one tensor. ``from_batch``: whether it depends on the batch (or a staged output)."""

    from_batch: bool = True

    def describe(self) -> str:
        return ""


@dataclass(frozen=True, eq=False)
class BatchLeaf(Expr):
    """A tensor of the (transferred) batch, at ``path``."""

    path: pytree.Path

    def describe(self) -> str:
        return pytree.describe_path("batch", self.path)


@dataclass(frozen=True, eq=False)
class UserInput(Expr):
    """``backbone_input(batch)``: made by the user's function (checked against the step's tensor like a
    derivation)."""

    fn: Callable[[Any], torch.Tensor]

    def describe(self) -> str:
        return "`backbone_input`"


@dataclass(frozen=True, eq=False)
class CallOutput(Expr):
    """A tensor in the output of staged call number ``call``, at ``path``."""

    call: int
    path: pytree.Path
    label: str = ""

    def describe(self) -> str:
        return pytree.describe_path(self.label or f"call {self.call}", self.path)


@dataclass(frozen=True, eq=False)
class Const(Expr):
    """A tensor that existed before the step (a buffer, a stored tensor): used as it is."""

    value: torch.Tensor
    from_batch: bool = False


@dataclass(frozen=True, eq=False)
class Apply(Expr):
    """``func(*args, **kwargs)``: ``spec`` rebuilds ``(args, kwargs)`` from ``leaves``, where expressions stand
    for tensors; under the autocast state ``amp``."""

    func: Callable[..., Any]
    spec: pytree.Spec
    leaves: tuple
    amp: tuple | None = None
    from_batch: bool = True
    path: pytree.Path = ()  # where the tensor lies in the function's output (``chunk``, ``max(dim)``)
    constant: bool = False  # made from Python values alone (``torch.tensor([...], device=...)``): computed once

    def parents(self) -> list[Expr]:
        return [leaf for leaf in self.leaves if isinstance(leaf, Expr)]

    def describe(self) -> str:
        inner = next((p.describe() for p in self.parents() if p.from_batch), "")
        return f"{inner}.{op_name(self.func)}" if inner else op_name(self.func)


@dataclass
class Env:
    """What an evaluation reads: the staged batch and the outputs of the calls so far; results memoised, and
    constants (``folded``, kept across evaluations) computed once: a host-to-device copy of a Python list each
    step would cost a copy and could not be captured in a CUDA graph."""

    batch: Any
    outputs: list[Any] = field(default_factory=list)
    memo: dict[int, Any] = field(default_factory=dict)
    folded: dict[int, Any] = field(default_factory=dict)


def evaluate(expr: Expr, env: Env) -> Any:
    key = id(expr)
    if key in env.memo:
        return env.memo[key]
    if isinstance(expr, Apply) and expr.constant:
        if key not in env.folded:
            env.folded[key] = pytree.follow(_apply(expr, env), expr.path)
        return env.folded[key]
    if isinstance(expr, BatchLeaf):
        value = pytree.follow(env.batch, expr.path)
    elif isinstance(expr, UserInput):
        value = expr.fn(env.batch)
    elif isinstance(expr, CallOutput):
        value = pytree.follow(env.outputs[expr.call], expr.path)
    elif isinstance(expr, Const):
        value = expr.value
    elif isinstance(expr, Apply):
        value = pytree.follow(_apply(expr, env), expr.path)
    else:
        raise TypeError(f"unknown expression {expr!r}")
    env.memo[key] = value
    return value


def _apply(expr: Apply, env: Env) -> Any:
    key = (id(expr.func), id(expr.spec))  # several outputs of one call share the result
    if key in env.memo:
        return env.memo[key]
    values = [evaluate(leaf, env) if isinstance(leaf, Expr) else leaf for leaf in expr.leaves]
    args, kwargs = expr.spec.unflatten(values)
    with autocast_as(expr.amp):
        result = expr.func(*args, **kwargs)
    env.memo[key] = result
    return result


# ---------------------------------------------------------------- recording


@dataclass
class Known:
    """A tensor made in the step: its expression, or what blocks one (``blocker``); ``root`` describes the
    batch tensor it was made from (for messages)."""

    ref: weakref.ref
    expr: Expr | None
    blocker: str | None = None
    from_batch: bool = False
    root: torch.Tensor | None = None


class DerivationRecorder(TorchFunctionMode):
    """Follows every tensor the step makes while it is active; ``paused`` stops following (inside a frozen
    call). ``roots`` are ``(tensor, expression)`` pairs: the batch's tensors."""

    def __init__(self, roots: list[tuple[torch.Tensor, Expr]]) -> None:
        super().__init__()
        self.known: dict[int, Known] = {}
        self.paused = 0
        for t, expr in roots:
            self.track(t, expr, root=t)

    def track(self, t: torch.Tensor, expr: Expr | None, blocker: str | None = None,
              from_batch: bool | None = None, root: torch.Tensor | None = None) -> None:
        fb = expr.from_batch if from_batch is None and expr is not None else bool(from_batch)
        self.known[id(t)] = Known(weakref.ref(t), expr, blocker, fb, root)

    def lookup(self, t: Any) -> Known | None:
        k = self.known.get(id(t)) if isinstance(t, torch.Tensor) else None
        return k if k is not None and k.ref() is t else None

    def expr_of(self, t: torch.Tensor) -> tuple[Expr | None, Known | None]:
        """The tensor's expression (a :class:`Const` for a tensor the step did not make) and its record."""
        k = self.lookup(t)
        if k is None:
            return Const(t), None
        return k.expr, k

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's signature
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        try:
            self._record(func, args, kwargs, out)
        except Exception:  # noqa: BLE001 - recording never changes what the step computes
            pass
        return out

    def _record(self, func: Callable[..., Any], args: tuple, kwargs: dict, out: Any) -> None:
        name = op_name(func)
        if not isinstance(out, torch.Tensor):
            if name == "setitem" and args and (k := self.lookup(args[0])) is not None:
                self.track(args[0], None, "__setitem__", k.from_batch, k.root)  # written in place
            if not isinstance(out, (tuple, list)) or not any(isinstance(o, torch.Tensor) for o in out):
                return
        spec, leaves = pytree.flatten((args, kwargs))
        exprs: list[Any] = []
        blocker, from_batch, root = None, False, None
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                exprs.append(leaf)
                continue
            expr, k = self.expr_of(leaf)
            if k is not None:
                from_batch = from_batch or k.from_batch
                root = root if root is not None else k.root
                blocker = blocker or k.blocker
            exprs.append(expr)
        outs = pytree.leaves_with_paths(out)
        trainable = any(t.requires_grad for _, t in outs) or any(
            isinstance(v, torch.Tensor) and v.requires_grad for v in leaves)
        if blocker is None and trainable:
            blocker = TRAINABLE
        if blocker is None and name not in REPLAYABLE:
            blocker = name
        device = outs[0][1].device.type if outs else "cpu"
        for path, t in outs:
            if blocker is not None:
                self.track(t, None, blocker, from_batch, root)
            else:
                constant = not from_batch and all(isinstance(e, Apply) and e.constant for e in exprs if isinstance(e, Expr))
            self.track(t, Apply(_out_of_place(func), spec, tuple(exprs), amp_state(device), from_batch, path,
                                constant), root=root)

    def close(self) -> None:
        self.known.clear()
