"""The staged program: the frozen calls found in the first training step, in the order the step made them, each
with how its arguments are made from the batch (and from earlier calls' outputs); run on a staged batch, eagerly
or as one CUDA graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn

from lightning_streamprof.pipeline import pytree
from lightning_streamprof.pipeline.derivation import (
    Apply,
    BatchLeaf,
    CallOutput,
    Env,
    Expr,
    UserInput,
    autocast_as,
    evaluate,
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
    spec: pytree.Spec
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
        return ", ".join(a.expr.describe() for a in self.args if a.kind in ("equal", "same") and a.expr is not None)


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
        found = pytree.tensors(self.outputs)
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
    folded: dict[int, Any] = field(default_factory=dict)  # constants made in the step, computed once
    ungraphed: set[int] = field(default_factory=set)  # calls that run eagerly beside the graph
    notes: list[str] = field(default_factory=list)  # what the graph left out, and why

    def __post_init__(self) -> None:
        self.roots = _roots(self.calls)

    def _env(self, batch: Any, outputs: list[Any] | None = None) -> Env:
        return Env(batch, outputs or [], folded=self.folded)

    @property
    def active(self) -> list[StagedCall]:
        return [c for c in self.calls if c.active]

    @property
    def verifying(self) -> bool:
        return any(c.active and c.verify_left > 0 for c in self.calls)

    def root_values(self, batch: Any) -> list[torch.Tensor]:
        env = self._env(batch)
        return [evaluate(r, env) for r in self.roots]

    @property
    def graphable(self) -> bool:
        """Whether any active call may be in the graph."""
        return any(c.active and c.index not in self.ungraphed for c in self.calls)

    def run(self, batch: Any, use_graph: bool) -> StagedRun:
        """All active calls on ``batch`` (no gradients): the graph's, then the others eagerly."""
        keep = self.verifying
        if use_graph and self.graph is not None and self.roots and self.graphable:
            outputs, metas = (list(part) for part in self.graph(*self.root_values(batch)))
            if self.ungraphed:
                env = self._env(batch, outputs)
                with torch.no_grad():
                    outputs, rest = self._execute(env, keep, graphed=False)
                metas = [r if r is not None else m for r, m in zip(rest, metas)]
            return StagedRun(outputs, self._derived_inputs(batch, outputs) if keep else metas)
        with torch.no_grad():
            outputs, inputs = self._execute(self._env(batch), keep)
        return StagedRun(outputs, inputs)

    def _derived_inputs(self, batch: Any, outputs: list[Any]) -> list[Any]:
        """The derived arguments' values, for the first steps' check, beside a graph's outputs: only the
        derivations run (eagerly), never the calls, so that no frozen module runs eagerly on the staging thread."""
        env = self._env(batch, list(outputs))
        with torch.no_grad(), autocast_as(self.amp):
            return [[evaluate(a.expr, env) if a.kind == "equal" else None for a in call.args]  # type: ignore[arg-type]
                    if call.active else None for call in self.calls]

    def graph_forward(self, *roots: torch.Tensor) -> tuple[list[Any], list[Any]]:
        """The graph's calls as a function of the root tensors (what the graph captures); arguments come back as
        shapes only."""
        env = self._env(None)
        for expr, value in zip(self.roots, roots):
            env.memo[id(expr)] = value
        return self._execute(env, keep=False, graphed=True)

    def graph_failed(self, error: BaseException) -> bool:
        """A capture failed: a call that raised leaves the graph (with the calls that read its output) and runs
        eagerly after it; ``True`` while other calls can still be captured."""
        if not isinstance(error, CallFailed) or error.call.index in self.ungraphed:
            return False
        left = {error.call.index}
        for c in self.calls:
            if c.depends & left:
                left.add(c.index)
        self.ungraphed |= left
        why = f"{type(error.error).__name__}: {error.error}".splitlines()[0]
        names = ", ".join(f"`{self.calls[i].label}`" for i in sorted(left))
        self.notes.append(f"{names} run eagerly beside the graph (not capturable: {why})")
        if self.graphable:
            rank_zero_warn(f"StreamPipeline: {names} cannot be captured in a CUDA graph ({why}); it runs eagerly"
                           " after the graph of the other staged calls.")
        return self.graphable

    def _execute(self, env: Env, keep: bool, graphed: bool | None = None) -> tuple[list[Any], list[Any]]:
        """Run the active calls (``graphed``: only those in the graph, only those outside it, or all); outputs
        already in ``env`` stay."""
        outputs = env.outputs = list(env.outputs) + [None] * (len(self.calls) - len(env.outputs))
        inputs: list[Any] = [None] * len(self.calls)
        with autocast_as(self.amp):
            for call in self.calls:
                if not call.active or (graphed is not None and (call.index not in self.ungraphed) != graphed):
                    continue
                try:
                    values = [a.value if a.kind == "const" else evaluate(a.expr, env) for a in call.args]  # type: ignore[arg-type]
                    args, kwargs = call.spec.unflatten(values)
                    with autocast_as(call.amp):
                        out = call.fn(*args, **kwargs)
                except Exception as err:
                    raise CallFailed(call, err) from err
                outputs[call.index] = out
                inputs[call.index] = [(v if keep else TensorMeta.of(v)) if a.kind == "equal" else None
                                      for a, v in zip(call.args, values)]
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

