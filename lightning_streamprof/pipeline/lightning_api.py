"""Every place StreamPipeline touches Lightning's private API, in one module.

Checked against Lightning 2.6 (``lightning`` 2.6.0-2.6.6): the training loop's and the validation loop's data
fetchers (their class is swapped for a subclass that keeps the next batch staged, and their fetch-profiling
calls), the LightningModule's batch-hook dispatch (``_call_batch_hook``), the data-hook selector, and the epoch
loop's batch progress. On a version it does not know, :func:`unsupported_reason` says so and the pipeline trains
serially.

The class of the live fetcher object is swapped for a subclass whose ``__next__`` is the staging fetcher's
(:mod:`~lightning_streamprof.pipeline.fetcher`; single base: a mixin fails Python's ``__class__`` check).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import lightning
from lightning.pytorch import LightningModule, Trainer

CHECKED_VERSIONS = ("2.6",)
_CLASSES: dict[type, type] = {}


def unsupported_reason() -> str | None:
    """Why the pipeline cannot run on the installed Lightning (``None``: it can)."""
    version = lightning.__version__
    if ".".join(version.split(".")[:2]) not in CHECKED_VERSIONS:
        return (f"Lightning {version} is not a version StreamPipeline was checked against"
                f" ({', '.join(v + '.x' for v in CHECKED_VERSIONS)})")
    return None


# ---------------------------------------------------------------- the data fetcher


def data_fetcher(trainer: Trainer) -> Any:
    return trainer.fit_loop._data_fetcher


def takes_dataloader_iter(fetcher: Any) -> bool:
    """``training_step(dataloader_iter)``: the step fetches its own batches; nothing can be staged."""
    return type(fetcher).__name__.endswith("DataLoaderIterDataFetcher")


def eval_data_fetcher(trainer: Trainer) -> Any:
    """The fetcher of the validation run inside ``fit`` (made anew for each run)."""
    return trainer.fit_loop.epoch_loop.val_loop._data_fetcher


def fetcher_done(fetcher: Any) -> bool:
    """Whether the loader has no batch after the last one the fetcher read."""
    return fetcher.done


def set_fetcher_done(fetcher: Any, done: bool) -> None:
    """Whether the loop has a batch after the one the fetcher returns (the staged ones count)."""
    fetcher.done = done


def install_staging_fetcher(fetcher: Any, next_batch: Callable[[Any, Callable[[Any], Any]], Any],
                            on_iter: Callable[[], None]) -> None:
    """Swap the fetcher's class for one whose ``__next__`` is ``next_batch(fetcher, base_next)`` and whose
    ``__iter__`` calls ``on_iter()``."""
    fetcher.__class__ = _staging_class(type(fetcher))
    fetcher._stage_next, fetcher._on_iter = next_batch, on_iter


def restore_fetcher(fetcher: Any) -> None:
    if getattr(type(fetcher), "_streamprof_staging", False):
        fetcher.__class__ = type(fetcher).__mro__[1]
    fetcher.__dict__.pop("_stage_next", None)
    fetcher.__dict__.pop("_on_iter", None)


def _staging_class(base: type) -> type:
    if getattr(base, "_streamprof_staging", False):
        return base
    if base not in _CLASSES:

        def __iter__(self: Any) -> Any:
            base.__iter__(self)
            self._on_iter()
            return self

        def __next__(self: Any) -> Any:
            return self._stage_next(self, base.__next__)

        _CLASSES[base] = type(
            f"Staging{base.__name__}", (base,), {"__iter__": __iter__, "__next__": __next__, "_streamprof_staging": True}
        )
    return _CLASSES[base]


@contextlib.contextmanager
def fetch_profiled(fetcher: Any) -> Iterator[None]:
    """The loop's fetch action around what the fetcher does for batch N (waiting for its staging)."""
    fetcher._start_profiler()
    try:
        yield
    finally:
        fetcher._stop_profiler()


@contextlib.contextmanager
def fetch_unprofiled(fetcher: Any) -> Iterator[None]:
    """A read ahead of the loader that is not a step's fetch of its own."""
    start, stop = fetcher._start_profiler, fetcher._stop_profiler
    fetcher._start_profiler = fetcher._stop_profiler = _nothing
    try:
        yield
    finally:
        fetcher._start_profiler, fetcher._stop_profiler = start, stop


def _nothing() -> None:
    pass


def profiler_busy(trainer: Trainer) -> bool:
    """Whether the Trainer's profiler is recording now: a profiler that says so (``in_window``, as
    :class:`~lightning_streamprof.StreamProfiler` does for its windows and the steps that pay for them), or one
    driving a ``torch.profiler`` session (Lightning's ``PyTorchProfiler``) in a warm-up or recorded step."""
    profiler = trainer.profiler
    flag = getattr(profiler, "in_window", None)
    if flag is not None:
        return bool(flag)
    action = getattr(getattr(profiler, "profiler", None), "current_action", None)
    return action is not None and getattr(action, "name", "NONE") != "NONE"


def batches_started(trainer: Trainer) -> int:
    """Batches before the current one in this epoch."""
    return trainer.fit_loop.epoch_loop.batch_progress.current.ready


# ---------------------------------------------------------------- batch hooks


def replace_batch_hook(pl_module: LightningModule, hook: Callable[..., Any]) -> Callable[..., Any]:
    """Route the module's batch-hook dispatch through ``hook``; returns Lightning's own dispatch."""
    original = pl_module._call_batch_hook
    pl_module._call_batch_hook = hook  # type: ignore[method-assign]
    return original


def restore_batch_hook(pl_module: LightningModule) -> None:
    pl_module.__dict__.pop("_call_batch_hook", None)


def hook_owner(trainer: Trainer, hook_name: str) -> Any:
    """The LightningModule or LightningDataModule whose ``hook_name`` Lightning would call."""
    selector = trainer._data_connector._datahook_selector
    return selector.get_instance(hook_name) if selector is not None else trainer.lightning_module


# ---- the profiler's accesses


def profiled_trainer(profiler: Any) -> Trainer | None:
    """The Trainer that runs ``profiler``: Lightning gives the profiler a proxy of the Trainer's module
    (``Profiler._lightning_module``) when it sets it up; None before that or once the module is gone."""
    module = getattr(profiler, "_lightning_module", None)
    try:
        return module.trainer if module is not None else None
    except (ReferenceError, RuntimeError, AttributeError):
        return None


def fit_batches_started(trainer: Trainer) -> int:
    """Training batches started over the fit's epochs so far (a fit resumed from a checkpoint counts those before)."""
    return int(trainer.fit_loop.epoch_loop.batch_progress.total.ready)
