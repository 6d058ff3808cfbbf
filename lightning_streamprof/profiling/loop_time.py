"""What a fit spends outside its training steps: validation runs (and how long each waited for its first batch),
the start of each epoch after the first, and checkpoint saves, timed from Lightning's own profiler actions, with
the advice they call for.

Lightning calls ``on_validation_model_zero_grad`` just before a validation run inside fit, times each fetch as
``[_EvaluationLoop].val_next`` and ends the run with the strategy's ``on_validation_end``; ``save_checkpoint`` wraps
each save. A validation run's start-up is the time from its start to its first batch: the loader's iterator (with
``persistent_workers=False``, new worker processes each run) and the first fetch. An epoch's start-up is the same
from ``run_training_epoch``'s start to its first ``[_TrainingEpochLoop].train_dataloader_next`` (the first epoch's
iterator is made earlier, so only the later ones count).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lightning_streamprof.words import counted

VALIDATION_START = ".on_validation_model_zero_grad"
VALIDATION_END = ".on_validation_end"  # the strategy's, the last hook of a validation run
VALIDATION_FETCH = "[_EvaluationLoop].val_next"
CHECKPOINT = "save_checkpoint"
TRAINING_BATCH = "run_training_batch"
TRAINING_EPOCH = "run_training_epoch"
TRAINING_FETCH = "[_TrainingEpochLoop].train_dataloader_next"
#: the actions LoopTime handles by name (and the validation runs' first and last hooks, by their ends)
_ACTIONS = frozenset({TRAINING_FETCH, TRAINING_BATCH, TRAINING_EPOCH, VALIDATION_FETCH, CHECKPOINT})
#: fetches kept for the median of the usual fetch (the latest)
RECENT_FETCHES = 512
#: the start-up is worth a word when it takes this share of the fit at least
STARTUP_SHARE = 0.01


def concerns(action: str) -> bool:
    """Whether :class:`LoopTime` does anything at ``action``'s start or stop."""
    return action in _ACTIONS or action.endswith(VALIDATION_START) or action.endswith(VALIDATION_END)


@dataclass
class LoopTime:
    """Seconds of each validation run, of its start-up and of each checkpoint save, and the fit's span from its first
    training batch to the last of them (the hot path: a few string comparisons per Lightning action)."""

    clock: Callable[[], float] = time.perf_counter
    validation_s: list[float] = field(default_factory=list)
    startup_s: list[float] = field(default_factory=list)
    later_fetch_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_FETCHES))
    checkpoint_s: list[float] = field(default_factory=list)
    epoch_startup_s: list[float] = field(default_factory=list)
    train_fetch_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_FETCHES))
    epochs: int = 0
    _epoch_start: float | None = None
    _train_fetch_start: float | None = None
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
        if action == TRAINING_FETCH:
            self._train_fetch_start = self.clock()
        elif action == TRAINING_BATCH:
            if self.first is None:
                self.first = self.clock()
        elif action == TRAINING_EPOCH:
            self.epochs += 1
            self._epoch_start = self.clock() if self.epochs > 1 else None
        elif action == VALIDATION_FETCH:
            self._fetch_start = self.clock()
        elif action == CHECKPOINT:
            self._save_start = self.clock()

    def stop(self, action: str) -> None:
        if action == TRAINING_FETCH:
            now = self.clock()
            if self._epoch_start is not None:
                self.epoch_startup_s.append(now - self._epoch_start)
                self._epoch_start = None
            elif self._train_fetch_start is not None:
                self.train_fetch_s.append(now - self._train_fetch_start)
            self._train_fetch_start = None
        elif action == TRAINING_BATCH:
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

    def lines(self, loaders: list[Any], train_loaders: list[Any] = ()) -> list[str]:
        """What the fit spent outside training, as a share of its :attr:`span`, then the advice (``loaders``: the
        validation dataloaders, ``train_loaders`` the training ones)."""
        return self.facts() + self.advice(loaders, train_loaders)

    def facts(self) -> list[str]:
        """A line for the validation runs and one for the checkpoint saves (those the fit had)."""
        fit_seconds = self.span
        if fit_seconds <= 0:
            return []
        out = []
        if self.validation_s:
            total = sum(self.validation_s)
            text = (f"Validation: {counted(len(self.validation_s), 'run')}, {total:.2f} s ({total / fit_seconds:.1%} of the fit)")
            if self.startup_s:
                first = statistics.median(self.startup_s)
                later = statistics.median(self.later_fetch_s) if self.later_fetch_s else 0.0
                text += (f"; each waited {first * 1e3:.0f} ms (median) for its first batch, against {later * 1e3:.1f}"
                         " ms for the others")
            out.append(text + ".")
        if self.epoch_startup_s:
            first = statistics.median(self.epoch_startup_s)
            later = statistics.median(self.train_fetch_s) if self.train_fetch_s else 0.0
            out.append(f"Epochs: {len(self.epoch_startup_s)} after the first; each waited {first * 1e3:.0f} ms (median)"
                       f" for its first batch, against {later * 1e3:.1f} ms for the others.")
        if self.checkpoint_s:
            total = sum(self.checkpoint_s)
            out.append(f"Checkpoints: {counted(len(self.checkpoint_s), 'save')}, {total:.2f} s ({total / fit_seconds:.1%} of the "
                       f"fit; {statistics.median(self.checkpoint_s) * 1e3:.0f} ms each, median).")
        return out

    def advice(self, loaders: list[Any], train_loaders: list[Any] = ()) -> list[str]:
        """``persistent_workers=True`` where validation loaders start their workers again at every run, or training
        loaders at every epoch, and those start-ups, less a usual fetch, take ``STARTUP_SHARE`` of the fit or more."""
        fit_seconds = self.span
        if fit_seconds <= 0:
            return []
        out = [_restart_advice("validation loader", "run", self.startup_s, self.later_fetch_s, fit_seconds, loaders),
               _restart_advice("training loader", "epoch", self.epoch_startup_s, self.train_fetch_s, fit_seconds,
                               train_loaders)]
        return [line for line in out if line]



def _restart_advice(what: str, unit: str, startups: list[float], usual: deque[float] | list[float], fit_seconds: float,
                    loaders: list[Any]) -> str | None:
    """The advice for loaders that start their workers again at every ``unit``, when those start-ups (less a usual
    fetch) take ``STARTUP_SHARE`` of the fit or more."""
    restarting = [d for d in loaders if getattr(d, "num_workers", 0) > 0 and not getattr(d, "persistent_workers", True)]
    if not restarting or not startups:
        return None
    later = statistics.median(usual) if usual else 0.0
    excess = sum(max(0.0, s - later) for s in startups)
    if excess < STARTUP_SHARE * fit_seconds:
        return None
    workers = max(d.num_workers for d in restarting)
    return (f"The {what} starts its {workers} worker processes again at every {unit} "
            f"(persistent_workers=False): {excess:.2f} s ({excess / fit_seconds:.1%} of the fit) went to "
            f"start-ups; DataLoader(..., persistent_workers=True) keeps the workers between {unit}s.")


def trainer_loaders(trainer: Any, kind: str) -> list[Any]:
    """The Trainer's ``kind`` (``"val"``, ``"train"``) dataloaders (none when it has not made them)."""
    try:
        loaders = getattr(trainer, f"{kind}_dataloader" + ("s" if kind == "val" else ""), None)
    except Exception:  # noqa: BLE001 - Lightning's property reads loops that may not be set up
        return []
    if loaders is None:
        return []
    if isinstance(loaders, dict):
        return list(loaders.values())
    return list(loaders) if isinstance(loaders, (list, tuple)) else [loaders]
