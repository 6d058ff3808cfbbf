"""A clock over training steps, shared by the Lightning benchmarks."""

from __future__ import annotations

import time

import lightning as L
import torch


class StepClock(L.Callback):
    """Times training from the first batch at or after global step ``skip`` until :meth:`rate` is called."""

    def __init__(self, skip: int) -> None:
        self.skip, self.t0, self.n0 = skip, None, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.t0 is None and trainer.global_step >= self.skip:
            _sync(trainer)
            self.t0, self.n0 = time.perf_counter(), trainer.global_step

    def rate(self, trainer) -> float:
        """Steps per second since the clock started."""
        _sync(trainer)
        return (trainer.global_step - self.n0) / (time.perf_counter() - self.t0)


def _sync(trainer) -> None:
    if trainer.strategy.root_device.type == "cuda":
        torch.cuda.synchronize()
