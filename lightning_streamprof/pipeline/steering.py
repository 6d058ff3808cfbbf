"""The way each training batch runs: fixed by ``mode`` (``"on"``, ``"off"``), or under ``mode="auto"`` serial
until the ways to try are known (after the first step has found the frozen calls), then
:class:`~lightning_streamprof.pipeline.auto.AutoSwitch`'s decision for each batch. Each new decision is logged to
the Trainer's loggers (:func:`~lightning_streamprof.pipeline.explain.decision_metrics`)."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch
from lightning.pytorch import Trainer

from lightning_streamprof.pipeline import explain
from lightning_streamprof.pipeline import lightning_api as api
from lightning_streamprof.pipeline.auto import AutoSwitch
from lightning_streamprof.pipeline.way import Way


class Steering:
    """``way`` for every batch until :meth:`start_auto`; then auto's. ``release_graph(way)`` is told of each new
    choice that is not a revert (a way without the calls' CUDA graph frees it)."""

    def __init__(self, way: Way, trainer: Trainer, release_graph: Callable[[Way], None]) -> None:
        self.way = way
        self.auto: AutoSwitch | None = None
        self._trainer, self._release_graph = trainer, release_graph

    def start_auto(self, ways: Sequence[Way], cuda: bool, warmup: int, trial: int, recheck: int) -> AutoSwitch:
        """Auto's trials of ``ways``, timed on the device's clock (``cuda``) and averaged over the ranks."""
        device = self._trainer.strategy.root_device
        sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
        self.auto = AutoSwitch(ways, sync=sync, clock=time.perf_counter, reduce=_rank_mean(self._trainer),
                               warmup=warmup, trial=trial, recheck=recheck)
        return self.auto

    @property
    def pipelined(self) -> bool:
        """Whether auto runs a pipelined way now."""
        return self.auto is not None and self.auto.pipelined

    def next(self) -> Way:
        """The way of the batch about to be fetched."""
        if self.auto is not None:
            decision = self.auto.step()
            if decision.measured is not None:
                self.log(decision.gain)
                if decision.reverted is None:
                    self._release_graph(decision.way)
            self.way = decision.way
        return self.way

    def exclude(self) -> None:
        """The step now running does more than train: auto leaves it out of its timings."""
        if self.auto is not None:
            self.auto.exclude()

    def phase_changed(self) -> None:
        """A new epoch or dataloader, or validation ended: a serial choice is tried again sooner."""
        if self.auto is not None:
            self.auto.phase_changed()

    def exclude_if_profiled(self) -> None:
        """A profiler's window (or a step that pays for one) is not a step for auto to time."""
        if self.auto is not None and api.profiler_busy(self._trainer):
            self.auto.exclude()

    def log(self, gain: float | None = None) -> bool:
        """Log auto's current choice with the measured gain behind it (default: the last trials'); whether
        there was one to log."""
        if self.auto is None or not self.auto.history:
            return False
        metrics = explain.decision_metrics(self.auto, gain)
        for logger in self._trainer.loggers:
            logger.log_metrics(metrics, step=self._trainer.global_step)
        return True


def _rank_mean(trainer: Trainer) -> Callable[[list[float]], list[float]]:
    """Averages over the ranks (a collective: every rank calls it at the same step), so all ranks choose alike."""
    if trainer.world_size <= 1:
        return lambda values: values

    def mean(values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=trainer.strategy.root_device)
        return trainer.strategy.reduce(tensor, reduce_op="mean").tolist()

    return mean
