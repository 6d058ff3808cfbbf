"""Serving staged outputs to an unchanged ``training_step``: each staged call's method is replaced on its module
(an instance attribute: the state dict is unchanged) by one that returns the staged output when the step calls
it with the staged arguments, and computes normally for any other call."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import torch
from lightning.pytorch.utilities import rank_zero_warn

from lightning_streamprof.pipeline import pytree
from lightning_streamprof.pipeline.derivation import BatchLeaf, CallOutput, Expr
from lightning_streamprof.pipeline.frozen import Patch, undo_all
from lightning_streamprof.pipeline.graph import outputs_close
from lightning_streamprof.pipeline.program import Program, StagedCall, StagedRun, TensorMeta, describe_tensor

FIX = ("Make that tensor in `on_after_batch_transfer` (it is staged with the batch) or pass `backbone_input=`"
       " (a function of the batch).")


class CallProxies:
    """The replaced methods of a program's calls. ``serve(batch, run)`` offers one staged batch's outputs to the
    current step: each call's output goes to the step's first call of its method whose arguments match (the same
    batch tensors and earlier outputs by identity, the same constants, derived tensors equal to the staged ones on
    the first ``verify_left`` steps and of the same shape, dtype and device after). On those first steps the
    output is also computed in the step and compared (a frozen module whose weights or state change between
    the staging and the step is found there). A mismatch stops the call running ahead, with one warning."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.misses: dict[str, int] = defaultdict(int)
        self.evaluating = False  # serving validation batches (their hits counted apart)
        self.eval_hits: dict[str, int] = defaultdict(int)
        self._batch: Any = None
        self._run: StagedRun | None = None
        self._pending: set[int] = set()
        groups: dict[tuple[int, str], list[StagedCall]] = {}
        for call in program.calls:
            groups.setdefault((id(call.module), call.method), []).append(call)
        self._patches = [
            Patch(calls[0].module, calls[0].method, lambda original, calls=calls: self._replacement(original, calls))
            for calls in groups.values()
        ]

    def serve(self, batch: Any, run: StagedRun | None) -> None:
        self._batch, self._run = batch, run
        self._pending = {c.index for c in self.program.active} if run is not None else set()

    def remove(self) -> None:
        undo_all(self._patches)
        self.serve(None, None)

    def _replacement(self, original: Callable[..., Any], calls: list[StagedCall]) -> Callable[..., Any]:
        label = calls[0].label

        def method(*args: Any, **kwargs: Any) -> Any:
            if self._pending:
                served = self._offer(calls, original, args, kwargs)
                if served is not _NONE:
                    return served
            self.misses[label] += 1
            return original(*args, **kwargs)

        method.__wrapped__ = original  # type: ignore[attr-defined]
        return method

    def _offer(self, calls: list[StagedCall], original: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        run = self._run
        assert run is not None
        spec, leaves = pytree.flatten((args, kwargs))
        for call in calls:
            if call.index not in self._pending or not call.active or spec != call.spec:
                continue
            if not self._matches(call, leaves, run):
                continue
            self._pending.discard(call.index)
            out = run.outputs[call.index]
            if call.verify_left > 0:
                if not self._verified(call, leaves, run, original(*args, **kwargs), out):
                    return _NONE
                call.verify_left -= 1
            if self.evaluating:
                self.eval_hits[call.label] += 1
            else:
                call.hits += 1
            return out
        return _NONE

    def _resolve(self, expr: Expr | None, run: StagedRun) -> Any:
        if isinstance(expr, BatchLeaf):
            return pytree.follow(self._batch, expr.path)
        if isinstance(expr, CallOutput):
            return pytree.follow(run.outputs[expr.call], expr.path)
        return _NONE

    def _matches(self, call: StagedCall, leaves: list[Any], run: StagedRun) -> bool:
        expected = run.inputs[call.index] or []
        for j, (arg, got) in enumerate(zip(call.args, leaves)):
            if arg.kind == "same":
                if got is not self._resolve(arg.expr, run):
                    return False
            elif arg.kind == "equal":
                want = expected[j]
                meta = TensorMeta.of(want) if isinstance(want, torch.Tensor) else want
                if not isinstance(got, torch.Tensor) or TensorMeta.of(got) != meta:
                    return False
            elif isinstance(arg.value, torch.Tensor) or isinstance(got, torch.Tensor):
                if got is not arg.value:
                    return False
            elif not _same_value(got, arg.value):
                return False
        return True

    def _verified(self, call: StagedCall, leaves: list[Any], run: StagedRun, computed: Any, staged: Any) -> bool:
        """The staged arguments' values and the staged output against the step's own (first steps only)."""
        expected = run.inputs[call.index] or []
        for j, (arg, got) in enumerate(zip(call.args, leaves)):
            want = expected[j] if arg.kind == "equal" else None
            if isinstance(want, torch.Tensor) and not torch.equal(got, want):
                what = arg.expr.describe() if arg.expr is not None else "argument"
                return self._stop(call, f"the staged argument ({what}) differs from the"
                                        f" {describe_tensor(got)} tensor `training_step` passes")
        if not outputs_close(staged, computed):
            return self._stop(call, "its staged output differs from the output computed in the step (do its weights"
                                    " or state change between steps?)")
        return True

    def _stop(self, call: StagedCall, why: str) -> bool:
        stopped = self.program.stop(call, why)
        self._pending -= {c.index for c in stopped}
        others = [c.label for c in stopped if c is not call]
        also = f" (and {', '.join(f'`{o}`' for o in others)}, which read its output)" if others else ""
        rank_zero_warn(f"StreamPipeline: `{call.label}`: {why}; it runs in the step from now on{also}. {FIX}")
        return False


_NONE = object()


def _same_value(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - values that do not compare to a truth value
        return False
