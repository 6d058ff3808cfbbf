"""The profiler's logging through the Trainer's loggers: metrics to every logger, each window's markdown to
TensorBoard's text tab on global rank 0; a logger's failure is a warning, never the run's end."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger

#: TensorBoard text tag of each window's markdown summary
TEXT_TAG = "streamprof/summary"
#: TensorBoard scalar of the profiling cost as a fraction of the training time so far
OVERHEAD_TAG = "streamprof/overhead"


class LoggerFanOut:
    """Logs to the loggers of the Trainer that ``trainer()`` gives (none without one) from global rank ``rank``."""

    def __init__(self, trainer: Callable[[], Any], rank: int) -> None:
        self._trainer, self._rank = trainer, rank

    def _loggers(self) -> list[Any]:
        return list(getattr(self._trainer(), "loggers", None) or [])

    def log(self, metrics: dict[str, float], step: int, save: bool = False, text: str | None = None) -> None:
        """``metrics`` at ``step`` (and ``text`` as TensorBoard markdown on rank 0); ``save`` flushes each logger."""
        for logger in self._loggers():
            try:
                if metrics:
                    logger.log_metrics(metrics, step=step)
                if text is not None and isinstance(logger, TensorBoardLogger) and self._rank == 0:
                    logger.experiment.add_text(TEXT_TAG, text, global_step=step)
                if save:
                    logger.save()
            except Exception as err:  # noqa: BLE001
                warnings.warn(f"StreamProfiler: could not log window metrics: {err}", stacklevel=2)

    def log_dirs(self) -> list[str]:
        """The directories of the TensorBoard loggers (for ``tensorboard --logdir``)."""
        return [str(lg.root_dir) for lg in self._loggers() if isinstance(lg, TensorBoardLogger) and lg.root_dir]
