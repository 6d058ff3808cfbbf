"""The staged program: the frozen calls found in the first training step, in the order the step made them, each
with how its arguments are made from the batch (and from earlier calls' outputs); run on a staged batch, eagerly
or as one CUDA graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import torch
from torch import nn

from lightning_streamprof.pipeline import tree
from lightning_streamprof.pipeline.derivation import (
    Apply,
    BatchLeaf,
    CallOutput,
    Env,
    Expr,
    UserInput,
    autocast_as,
    base_of,
    evaluate,
    steps_of,
)
from lightning_streamprof.pipeline.graph import GraphedForward


class TensorMeta(NamedTuple):
    """What a staged argument is checked against once its values were checked on the first steps."""

    shape: tuple
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        return cls(tuple(t.shape), t.dtype, t.device)


def describe_tensor(t: torch.Tensor | TensorMeta) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"


@dataclass(frozen=True)
class Arg:
    """How one leaf of a call's arguments is matched: ``const`` (the same value; a tensor: the same object),
    ``same`` (the batch's tensor or an earlier staged output, by identity) or ``equal`` (made by a derivation:
    the staged tensor's values on the first steps, then its shape, dtype and device)."""

    kind: str
    expr: Expr | None = None
    value: Any = None


@dataclass(eq=False)
class StagedCall:
    """One frozen call of the step: ``module.method(*args, **kwargs)`` with ``spec`` rebuilding the arguments
    from ``args`` (one :class:`Arg` per leaf), under the autocast state ``amp``."""

    index: int
    name: str
    method: str
    module: nn.Module
    fn: Callable[..., Any]
    spec: tree.Spec
    args: tuple[Arg, ...]
    amp: tuple | None
    depends: frozenset[int] = frozenset()
    verify_left: int = 2
    hits: int = 0
    mismatch: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name}.{self.method}"

    @property
    def active(self) -> bool:
        return self.mismatch is None

    def derivations(self) -> str:
        """How its arguments are made, for reports: ``batch['image'].float.truediv``."""
        parts = []
        for a in self.args:
            if a.kind == "equal" and a.expr is not None:
                base = base_of(a.expr)
                steps = ".".join(steps_of(a.expr))
                parts.append(f"{base.describe()}.{steps}" if steps and not isinstance(base, Apply) else a.expr.describe())
            elif a.kind == "same" and a.expr is not None:
                parts.append(a.expr.describe())
        return ", ".join(parts)


class CallFailed(Exception):
    """A staged call raised ``error``."""

    def __init__(self, call: StagedCall, error: BaseException) -> None:
        super().__init__(f"{call.label}: {error}")
        self.call, self.error = call, error


@dataclass
class StagedRun:
    """One staged batch's results: per call, its output and the values (or, once checked, the shapes) of its
    ``equal`` arguments; ``None`` for a call that no longer runs ahead."""

    outputs: list[Any]
    inputs: list[list[Any] | None]

    def tensors(self) -> list[torch.Tensor]:
        found = tree.tensors(self.outputs)
        for values in self.inputs:
            if values:
                found += [v for v in values if isinstance(v, torch.Tensor)]
        return found


@dataclass(eq=False)
class Program:
    """The staged calls; ``graph`` replays them all as one CUDA graph (the batch tensors they read as its
    inputs)."""

    calls: list[StagedCall]
    amp: tuple | None = None  # the state most calls ran under: the whole run is entered into it once
    graph: GraphedForward | None = None
    stale: bool = False  # a call stopped running ahead: the graph is released at the end of the step
    roots: list[Expr] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.roots = _roots(self.calls)

    @property
    def active(self) -> list[StagedCall]:
        return [c for c in self.calls if c.active]

    @property
    def verifying(self) -> bool:
        return any(c.active and c.verify_left > 0 for c in self.calls)

    def root_values(self, batch: Any) -> list[torch.Tensor]:
        env = Env(batch)
        return [evaluate(r, env) for r in self.roots]

    def run(self, batch: Any, use_graph: bool) -> StagedRun:
        """All active calls on ``batch`` (no gradients), as the graph where it may be used."""
        keep = self.verifying
        if use_graph and self.graph is not None and self.roots:
            outputs, metas = self.graph(*self.root_values(batch))
            return StagedRun(list(outputs), self._derived_inputs(batch, outputs) if keep else list(metas))
        with torch.no_grad():
            outputs, inputs = self._execute(Env(batch), keep)
        return StagedRun(outputs, inputs)

    def _derived_inputs(self, batch: Any, outputs: list[Any]) -> list[Any]:
        """The derived arguments' values, for the first steps' check, beside a graph's outputs: only the
        derivations run (eagerly), never the calls, so that no frozen module runs eagerly on the staging thread."""
        env = Env(batch, outputs=list(outputs))
        with torch.no_grad(), autocast_as(self.amp):
            return [[evaluate(a.expr, env) if a.kind == "equal" else None for a in call.args]  # type: ignore[arg-type]
                    if call.active else None for call in self.calls]

    def graph_forward(self, *roots: torch.Tensor) -> tuple[list[Any], list[Any]]:
        """The calls as a function of the root tensors (what the graph captures); arguments come back as
        shapes only."""
        env = Env(None)
        for expr, value in zip(self.roots, roots):
            env.memo[id(expr)] = value
        return self._execute(env, keep=False)

    def _execute(self, env: Env, keep: bool) -> tuple[list[Any], list[Any]]:
        outputs: list[Any] = []
        inputs: list[Any] = []
        with autocast_as(self.amp):
            for call in self.calls:
                if not call.active:
                    outputs.append(None)
                    inputs.append(None)
                    env.outputs.append(None)
                    continue
                try:
                    values = [a.value if a.kind == "const" else evaluate(a.expr, env) for a in call.args]  # type: ignore[arg-type]
                    args, kwargs = call.spec.unflatten(values)
                    with autocast_as(call.amp):
                        out = call.fn(*args, **kwargs)
                except Exception as err:
                    raise CallFailed(call, err) from err
                outputs.append(out)
                env.outputs.append(out)
                inputs.append([(v if keep else TensorMeta.of(v)) if a.kind == "equal" else None
                               for a, v in zip(call.args, values)])
        return outputs, inputs

    def stop(self, call: StagedCall, why: str) -> list[StagedCall]:
        """``call`` stops running ahead, and every call that reads its output; returns them."""
        stopped: list[StagedCall] = []
        for c in self.calls:
            if c.active and (c is call or c.depends & {s.index for s in stopped}):
                c.mismatch = why if c is call else f"it reads the output of `{call.label}`, which stopped running ahead"
                stopped.append(c)
        self.stale = bool(stopped) and self.graph is not None
        return stopped


def _roots(calls: list[StagedCall]) -> list[Expr]:
    """The batch tensors and user inputs the calls' arguments are made from, once each, in order."""
    seen: dict[int, Expr] = {}

    def visit(expr: Expr) -> None:
        if isinstance(expr, (BatchLeaf, UserInput)):
            seen.setdefault(id(expr), expr)
        elif isinstance(expr, Apply):
            for p in expr.parents():
                visit(p)

    for call in calls:
        for a in call.args:
            if a.expr is not None:
                visit(a.expr)
    return list(seen.values())


def reads_outputs(expr: Expr | None) -> set[int]:
    """The staged calls whose outputs an expression reads."""
    if isinstance(expr, CallOutput):
        return {expr.call}
    if isinstance(expr, Apply):
        return set().union(*(reads_outputs(p) for p in expr.parents())) if expr.parents() else set()
    return set()

