"""The first training step, watched: which frozen modules it calls, through which method, with what made from
the batch; the calls that can be staged become the :class:`Program`, the others get a reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from lightning_streamprof.pipeline import pytree
from lightning_streamprof.pipeline.derivation import (
    BatchLeaf,
    CallOutput,
    Const,
    TRAINABLE,
    DerivationRecorder,
    Known,
    amp_state,
)
from lightning_streamprof.pipeline.frozen import Patch, call_methods, inner_frozen, sharded, undo_all
from lightning_streamprof.pipeline.proxy import FIX
from lightning_streamprof.pipeline.program import Arg, Program, StagedCall, describe_tensor, reads_outputs

#: staged calls per step at most (a frozen module called in a loop is computed in the step beyond this)
MAX_CALLS = 32


@dataclass
class Findings:
    """What the first step showed: the program (``None``: nothing to stage), per ``module.method`` why it is not
    staged (``refused``: called with something made from the batch, with the fix; ``unrelated``: nothing of the
    call can run ahead, such as a call on the trainable outputs), and the watched modules the step called."""

    program: Program | None
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    unrelated: dict[str, str] = field(default_factory=dict)
    called: set[str] = field(default_factory=set)


class CallProbe:
    """Watches ``watched`` (name, frozen module) during the first training step: ``forward`` and the public
    methods of each, and ``forward`` of the frozen modules inside them, while a :class:`DerivationRecorder`
    follows how the step makes their arguments. Calls made from inside a watched call are part of it."""

    def __init__(self, watched: list[tuple[str, nn.Module]], refuse_sharded: bool = False) -> None:
        self.watched = watched
        self.refuse_sharded = refuse_sharded  # with CUDA streams and threads: a sharded module's gathers stay
        self._recorder: DerivationRecorder | None = None
        self._patches: list[Patch] = []
        self._calls: list[StagedCall] = []
        self._found = Findings(None)

    @property
    def watching(self) -> bool:
        return self._recorder is not None

    def start(self, batch: Any) -> None:
        self._recorder = DerivationRecorder([(t, BatchLeaf(path)) for path, t in pytree.leaves_with_paths(batch)])
        for root, module in self.watched:
            for name, sub in inner_frozen(root, module):
                for method in (call_methods(sub) if sub is module else ["forward"]):
                    self._patches.append(Patch(sub, method, self._watcher(root, name, sub, method)))
        self._recorder.__enter__()

    def stop(self) -> Findings:
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.__exit__(None, None, None)
            recorder.close()
        undo_all(self._patches)
        self._patches.clear()
        if self._calls:
            amps = Counter(c.amp for c in self._calls)
            self._found.program = Program(self._calls, amp=amps.most_common(1)[0][0])
        return self._found

    def _watcher(self, root: str, name: str, module: nn.Module, method: str) -> Callable[[Callable[..., Any]], Any]:
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def watched(*args: Any, **kwargs: Any) -> Any:
                return self._called(root, name, module, method, original, args, kwargs)
            return watched
        return make

    def _called(self, root: str, name: str, module: nn.Module, method: str, original: Callable[..., Any],
                args: tuple, kwargs: dict) -> Any:
        rec = self._recorder
        if rec is None or rec.paused:
            return original(*args, **kwargs)
        self._found.called.add(root)
        label = f"{name}.{method}"
        spec, leaves = pytree.flatten((args, kwargs))
        judged = _judge(leaves, _arg_labels(args, kwargs), rec)
        tensors = [v for v in leaves if isinstance(v, torch.Tensor)]
        device = tensors[0].device if tensors else torch.device("cpu")
        rng = _rng_state(device)
        rec.paused += 1
        try:
            out = original(*args, **kwargs)
        finally:
            rec.paused -= 1
        problem, fix = judged.problem, FIX
        split = sharded(module) if self.refuse_sharded and problem is None and judged.from_batch else None
        if split is not None:
            problem = (f"is sharded across ranks ({split}): its forward gathers its weights in collectives that"
                       " every rank must issue in the step's order, never from the staging thread or a side stream")
            fix = ""
        if problem is None and judged.from_batch and not _same_rng(rng, _rng_state(device)):
            problem = "draws random numbers (the global generator advanced during the call)"
            fix = ("Call `.eval()` on it if that is dropout, or draw the random numbers in the step from its output"
                   " (the staged part must be deterministic).")
        if problem is None and judged.from_batch and len(self._calls) >= MAX_CALLS:
            problem, fix = f"is called more than {MAX_CALLS} times in the step", ""
        if problem is None and judged.from_batch:
            index = len(self._calls)
            self._calls.append(StagedCall(index, name, method, module, original, spec, tuple(judged.args),
                                          amp_state(device.type), frozenset(judged.depends)))
            for path, t in pytree.leaves_with_paths(out):
                rec.track(t, CallOutput(index, path, label), root=t)
            return out
        if problem is not None and judged.from_batch and not judged.inherent:
            self._found.refused.setdefault(label, (problem, fix))
        else:
            self._found.unrelated.setdefault(label, problem or "is called with nothing made from the batch")
        for _, t in pytree.leaves_with_paths(out):
            rec.track(t, None, f"`{label}`, which is not staged", judged.from_batch)
        return out


@dataclass
class _Judged:
    args: list[Arg] = field(default_factory=list)
    problem: str | None = None
    inherent: bool = False  # the problem is the call's nature (it needs this step's weights): nothing to fix
    from_batch: bool = False
    depends: set[int] = field(default_factory=set)


def _judge(leaves: list[Any], labels: list[str], rec: DerivationRecorder) -> _Judged:
    """How each argument leaf of a call would be staged, and the first reason one cannot be."""
    j = _Judged()
    for leaf, where in zip(leaves, labels):
        if not isinstance(leaf, torch.Tensor):
            j.args.append(Arg("const", value=leaf))
            continue
        expr, k = rec.expr_of(leaf)
        if expr is None:
            assert k is not None
            j.from_batch = j.from_batch or k.from_batch
            if j.problem is None:
                j.problem = _blocked(where, leaf, k)
                j.inherent = k.blocker == TRAINABLE or (k.blocker or "").startswith("`")
            j.args.append(Arg("const", value=leaf))
        elif isinstance(expr, Const):
            if leaf.requires_grad and j.problem is None:
                j.problem, j.inherent = f"is called with {where} ({describe_tensor(leaf)}), a trainable tensor", True
            j.args.append(Arg("const", value=leaf))
        else:
            j.from_batch = j.from_batch or expr.from_batch
            j.depends |= reads_outputs(expr)
            j.args.append(Arg("same" if isinstance(expr, (BatchLeaf, CallOutput)) else "equal", expr))
    return j


def _blocked(where: str, t: torch.Tensor, k: Known) -> str:
    what = f"{where} ({describe_tensor(t)}"
    if k.root is not None and k.root is not t:
        what += f", made from the batch's {describe_tensor(k.root)} tensor"
    what += ")"
    blocker = k.blocker or "?"
    if blocker == TRAINABLE:
        return f"is called with {what}, which depends on the trainable weights"
    if blocker.startswith("`"):
        return f"is called with {what}, made from the output of {blocker}"
    if k.from_batch:
        return f"is called with {what}, which `training_step` makes by an operation that cannot be replayed: `{blocker}`"
    return f"is called with {what}, made by an operation that cannot be replayed: `{blocker}`"


def _arg_labels(args: tuple, kwargs: dict) -> list[str]:
    """A label per leaf of ``(args, kwargs)``, in :func:`pytree.flatten`'s order."""
    labels: list[str] = []
    for i, a in enumerate(args):
        labels += [f"argument {i}"] * len(pytree.flatten(a)[1])
    for key, v in kwargs.items():
        labels += [f"`{key}=`"] * len(pytree.flatten(v)[1])
    return labels


def _rng_state(device: torch.device) -> list[torch.Tensor]:
    states = [torch.random.default_generator.get_state()]
    if device.type == "cuda":
        states.append(torch.cuda.default_generators[device.index if device.index is not None
                                                    else torch.cuda.current_device()].get_state())
    return states


def _same_rng(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))
