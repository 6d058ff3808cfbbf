"""What a fit spends outside its training steps: validation runs (and how long each waited for its first batch)
and checkpoint saves, timed from Lightning's own profiler actions, with the advice they call for.

Lightning calls ``on_validation_model_zero_grad`` just before a validation run inside fit, times each fetch as
``[_EvaluationLoop].val_next`` and ends the run with the strategy's ``on_validation_end``; ``save_checkpoint`` wraps
each save. A validation run's start-up is the time from its start to its first batch: the loader's iterator (with
``persistent_workers=False``, new worker processes each run) and the first fetch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

VALIDATION_START = ".on_validation_model_zero_grad"
VALIDATION_END = ".on_validation_end"  # the strategy's, the last hook of a validation run
VALIDATION_FETCH = "[_EvaluationLoop].val_next"
CHECKPOINT = "save_checkpoint"
TRAINING_BATCH = "run_training_batch"
#: the start-up is worth a word when it takes this share of the fit at least
STARTUP_SHARE = 0.01


@dataclass
class LoopTime:
    """Seconds of each validation run, of its start-up and of each checkpoint save, and the fit's span from its first
    training batch to the last of them (the hot path: a few string comparisons per Lightning action)."""

    clock: Callable[[], float] = time.perf_counter
    validation_s: list[float] = field(default_factory=list)
    startup_s: list[float] = field(default_factory=list)
    later_fetch_s: list[float] = field(default_factory=list)
    checkpoint_s: list[float] = field(default_factory=list)
    _val_start: float | None = None
    _awaiting_first: bool = False
    _fetch_start: float | None = None
    _save_start: float | None = None
    first: float | None = None
    last: float | None = None

    @property
    def span(self) -> float:
        """Seconds from the first training batch's start to the end of the last batch, validation or save."""
        return self.last - self.first if self.first is not None and self.last is not None else 0.0

    def start(self, action: str) -> None:
        if action == TRAINING_BATCH:
            if self.first is None:
                self.first = self.clock()
        elif action == VALIDATION_FETCH:
            self._fetch_start = self.clock()
        elif action == CHECKPOINT:
            self._save_start = self.clock()

    def stop(self, action: str) -> None:
        if action == TRAINING_BATCH:
            self.last = self.clock()
        elif action == VALIDATION_FETCH:
            now = self.clock()
            if self._awaiting_first and self._val_start is not None:
                self.startup_s.append(now - self._val_start)
                self._awaiting_first = False
            elif self._fetch_start is not None:
                self.later_fetch_s.append(now - self._fetch_start)
            self._fetch_start = None
        elif action == CHECKPOINT and self._save_start is not None:
            self.last = self.clock()
            self.checkpoint_s.append(self.last - self._save_start)
            self._save_start = None
        elif action.endswith(VALIDATION_START):
            self._val_start, self._awaiting_first = self.clock(), True
        elif action.endswith(VALIDATION_END) and action.startswith("[Strategy]") and self._val_start is not None:
            self.last = self.clock()
            self.validation_s.append(self.last - self._val_start)
            self._val_start, self._awaiting_first = None, False

    def lines(self, loaders: list[Any]) -> list[str]:
        """What the fit spent outside training, as a share of its :attr:`span`, with the validation loader's advice
        after the validation line (``loaders``: the validation dataloaders)."""
        facts, advice = self.facts(), self.advice(loaders)
        return facts[:1] + advice + facts[1:] if self.validation_s else facts

    def facts(self) -> list[str]:
        """A line for the validation runs and one for the checkpoint saves (those the fit had)."""
        fit_seconds = self.span
        if fit_seconds <= 0:
            return []
        out = []
        if self.validation_s:
            total = sum(self.validation_s)
            text = (f"Validation: {len(self.validation_s)} runs, {total:.2f} s ({total / fit_seconds:.1%} of the fit)")
            if self.startup_s:
                first = statistics.median(self.startup_s)
                later = statistics.median(self.later_fetch_s) if self.later_fetch_s else 0.0
                text += (f"; each waited {first * 1e3:.0f} ms (median) for its first batch, against {later * 1e3:.1f}"
                         " ms for the others")
            out.append(text + ".")
        if self.checkpoint_s:
            total = sum(self.checkpoint_s)
            out.append(f"Checkpoints: {len(self.checkpoint_s)} saves, {total:.2f} s ({total / fit_seconds:.1%} of the "
                       f"fit; {statistics.median(self.checkpoint_s) * 1e3:.0f} ms each, median).")
        return out

    def advice(self, loaders: list[Any]) -> list[str]:
        """``persistent_workers=True`` where validation loaders start their workers again at every run and the
        start-ups, less a usual fetch, take ``STARTUP_SHARE`` of the fit or more."""
        fit_seconds = self.span
        if fit_seconds <= 0:
            return []
        advice = self._startup_advice(fit_seconds, loaders)
        return [advice] if advice else []

    def _startup_advice(self, fit_seconds: float, loaders: list[Any]) -> str | None:
        restarting = [d for d in loaders if getattr(d, "num_workers", 0) > 0 and not getattr(d, "persistent_workers",
                                                                                              True)]
        if not restarting or not self.startup_s:
            return None
        later = statistics.median(self.later_fetch_s) if self.later_fetch_s else 0.0
        excess = sum(max(0.0, s - later) for s in self.startup_s)
        if excess < STARTUP_SHARE * fit_seconds:
            return None
        workers = max(d.num_workers for d in restarting)
        return (f"The validation loader starts its {workers} worker processes again at every run "
                f"(persistent_workers=False): {excess:.2f} s ({excess / fit_seconds:.1%} of the fit) went to "
                "start-ups; DataLoader(..., persistent_workers=True) keeps the workers between runs.")


def validation_loaders(trainer: Any) -> list[Any]:
    """The Trainer's validation dataloaders (none when it has not made them)."""
    try:
        loaders = getattr(trainer, "val_dataloaders", None)
    except Exception:  # noqa: BLE001 - Lightning's property reads loops that may not be set up
        return []
    if loaders is None:
        return []
    if isinstance(loaders, dict):
        return list(loaders.values())
    return list(loaders) if isinstance(loaders, (list, tuple)) else [loaders]
