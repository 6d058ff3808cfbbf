"""StreamPipeline, the Lightning callback: its hooks forward to the parts of one fit (:mod:`.fit`).

How it works, module by module: the staging fetchers keep batch N+1 staged while batch N runs (:mod:`.fetcher`;
one batch's staging: :mod:`.stager`, on the staging thread: :mod:`.thread`); the batch hooks do not run twice for a
staged batch (:mod:`.hooks`); the frozen calls are found on the first step and served to an unchanged step
(:mod:`.calls`, :mod:`.probe`, :mod:`.program`, :mod:`.proxy`, :mod:`.graph`); ``auto`` chooses the way each batch
runs (:mod:`.steering`, :mod:`.auto`). Every private Lightning access is in :mod:`.lightning_api`.

Random numbers: running batch N+1's hooks before batch N's step changes the order in which the global RNG is
consumed, so results equal serial training when the augmentation draws from its own generator (the transforms of
:mod:`lightning_streamprof.transforms` take one) and the hooks do not use the global RNG. Frozen calls that draw
random numbers are not staged, and random draws on their outputs (``latent_dist.sample()``) stay in the step.
``trainer.global_step`` in the batch hooks is one less than in serial training.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_streamprof.pipeline import explain
from lightning_streamprof.pipeline import lightning_api as api
from lightning_streamprof.pipeline.auto import RECHECK, TRIAL, WARMUP
from lightning_streamprof.pipeline.decision import Round
from lightning_streamprof.pipeline.fit import Fit
from lightning_streamprof.pipeline.frozen import check_frozen, resolve
from lightning_streamprof.pipeline.options import Backbone, Mode, Options
from lightning_streamprof.pipeline.program import StagedCall
from lightning_streamprof.pipeline.state import PipelineState


class StreamPipeline(Callback):
    r"""Prepares the next batch on a side CUDA stream while the current one trains: its copy to the device,
    ``on_after_batch_transfer`` (GPU augmentation), ``augment``, and the frozen modules' calls that the step makes
    from the batch, whose outputs reach an unchanged ``training_step`` (validation batches inside ``fit`` too).
    ``mode="auto"`` runs what ``"on"`` runs unless serial is measurably faster beside it in paired trials (alike on
    every DDP rank; :mod:`~lightning_streamprof.pipeline.auto`). Without CUDA
    the same logic runs in order, without streams. Results equal serial training when the hooks draw random
    numbers from their own generator. :meth:`report` says what was staged, what was not and why, and what was
    measured.

    Args:
        backbone: Frozen submodule(s) whose calls run ahead: a dotted name, a module, or a list of them. ``None``
            finds every frozen module the first training step calls with arguments made from the batch;
            ``False`` runs no frozen call ahead.
        augment: Callable applied to the batch's input tensor after ``on_after_batch_transfer``, in training
            only (serial or pipelined).
        mode: ``"auto"`` (what ``"on"`` runs, unless serial is measurably faster in paired trials), ``"on"`` (pipelined: with CUDA on the staging thread,
            the frozen calls as a CUDA graph where one can be captured and equals eager) or ``"off"``.
        backbone_input: Callable making the single ``backbone``'s input from the transferred batch; its
            ``forward`` is then staged with that input. Default: found on the first step.
        pin_memory: Pin host tensors before the copy (an asynchronous copy needs them).
        depth: Batches staged ahead (N+1 .. N+depth). More absorbs uneven batch preparation; each staged batch
            (and its frozen outputs) stays in device memory until its step.
        cuda_graph: Run the staged frozen calls as one CUDA graph per input shape (fewer host launches; other
            shapes, and calls that cannot be captured, run eagerly). ``None``: on with ``mode="on"``, one more way
            that ``auto`` measures (with CUDA and frozen calls).
        staging_thread: Stage on a background thread, started when the step reaches ``backward`` (the loader
            is still read by the loop). Hooks then run outside Lightning's hook dispatch (``self.log`` is not
            available in them) in profiler ranges of their usual names. ``None``: with CUDA, on for
            ``mode="on"`` and one more way that ``auto`` measures; off on CPU.
        warmup: Steps on the pipelined way of ``mode="on"`` before ``auto``'s first trials.
        trial: Steps per block of ``auto``'s paired trials (the first :data:`~lightning_streamprof.pipeline.auto.SETTLE`
            are not timed).
        recheck: Steps from a decision to the next trials (the interval grows while the trials confirm it;
            eight times at once after a pipelined win beyond 1.5x).

    Logged to the Trainer's loggers at each decision of ``auto`` and at the end of training:
        - ``streampipe/pipelined``: 1 when batches are staged ahead, 0 when training runs serially.
        - ``streampipe/gain``: the measured gain behind the choice: the fastest pipelined way's steps per second
          over serial's, minus one (after a revert to serial: the reverted way's, below zero).
        - ``streampipe/threaded``: 1 when batches are staged on the staging thread.
        - ``streampipe/graphed``: 1 when the staged frozen calls replay a CUDA graph.

    Raises:
        ValueError: At construction, for an argument out of range; at ``setup``, for a backbone with trainable
            parameters or an unknown submodule, or a second ``StreamPipeline`` in the Trainer.

    Example::

        import lightning as L
        import torch
        from torch import nn
        from lightning_streamprof import StreamPipeline

        class LinearProbe(L.LightningModule):  # a frozen encoder, whose calls run ahead, and a trained head
            def __init__(self):
                super().__init__()
                self.encoder, self.head = nn.Linear(32, 16).requires_grad_(False).eval(), nn.Linear(16, 2)

            def training_step(self, batch, batch_idx):
                return nn.functional.cross_entropy(self.head(self.encoder(batch[0])), batch[1])

            def configure_optimizers(self):
                return torch.optim.SGD(self.head.parameters(), lr=0.1)

        data = torch.utils.data.TensorDataset(torch.randn(64, 32), torch.randint(0, 2, (64,)))
        pipeline = StreamPipeline()
        trainer = L.Trainer(max_epochs=1, callbacks=[pipeline], logger=False, enable_checkpointing=False)
        trainer.fit(LinearProbe(), torch.utils.data.DataLoader(data, batch_size=8))
        print(pipeline.report())
    """

    def __init__(
        self,
        backbone: Backbone = None,
        augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
        mode: Mode = "auto",
        backbone_input: Callable[[Any], torch.Tensor] | None = None,
        pin_memory: bool = True,
        depth: int = 1,
        cuda_graph: bool | None = None,
        staging_thread: bool | None = None,
        warmup: int = WARMUP,
        trial: int = TRIAL,
        recheck: int = RECHECK,
    ) -> None:
        self._options = Options(backbone, augment, mode, backbone_input, pin_memory, depth, cuda_graph,
                                staging_thread, warmup, trial, recheck)
        self._fit: Fit | None = None  # the parts of the current (or last) fit; None before one or when disabled
        self._disabled: str | None = None  # why this fit trains serially

    @property
    def mode(self) -> Mode:
        return self._options.mode

    # ------------------------------------------------------------------ set-up and tear-down

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        pipelines = [cb for cb in trainer.callbacks if isinstance(cb, StreamPipeline)]
        if len(pipelines) > 1:
            raise ValueError(f"StreamPipeline: the Trainer has {len(pipelines)} StreamPipeline callbacks; each would"
                             " stage the batches, one of them for nothing. Keep one (a config's `trainer.callbacks`"
                             " and `--trainer.callbacks+=` add up).")
        for spec in self._options.specs or ():
            check_frozen(*resolve(pl_module, spec))

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._fit = None
        self._disabled = api.unsupported_reason() if self.mode != "off" else None
        if self._disabled:
            rank_zero_warn(f"StreamPipeline: {self._disabled}; training runs serially.")
            return
        self._fit = Fit.start(self._options, trainer, pl_module)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self._fit is not None:
            self._fit.shutdown()
            self._fit.calls.remove()

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        fit = self._fit
        if fit is None:
            return
        fit.end(trainer)
        if fit.steering.log():
            rank_zero_info(self.report())

    # ------------------------------------------------------------------ training

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        fit, fetcher = self._fit, api.data_fetcher(trainer)
        if fit is None or fetcher is None:
            return
        if api.takes_dataloader_iter(fetcher):
            rank_zero_warn("StreamPipeline: a `training_step` that takes `dataloader_iter` is not pipelined.")
            return
        api.install_staging_fetcher(fetcher, fit.train.next, fit.train.reset)
        fit.train.reset()
        fit.steering.exclude()  # the epoch's first fetch may start the loader's workers
        if trainer.current_epoch > 0:
            fit.steering.phase_changed()

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._fit is not None:
            self._fit.calls.start_step(batch)
            self._fit.steering.exclude_if_profiled()

    @override
    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor) -> None:
        fit = self._fit
        if fit is None:
            return
        fit.found_calls()
        if fit.stager.executor is not None:
            fit.train.start_fetched()  # the training thread now waits in the autograd engine, GIL released

    @override
    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        fit = self._fit
        if fit is None:
            return
        fit.steering.exclude_if_profiled()
        # staging overlaps the training step only: validation, checkpoints and epoch ends that follow see
        # no hook of the next batch running (its hooks see the trainer state of a training step)
        fit.train.resolve_all()
        fit.found_calls()
        auto = fit.steering.auto
        fit.calls.after_step(fit.train.staged, running_ahead=auto is None or auto.pipelined)

    @override
    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._fit is not None:
            self._fit.steering.exclude()

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._fit is not None:
            self._fit.steering.exclude()

    # ------------------------------------------------------------------ validation inside fit

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._fit is not None and (trainer.training or trainer.state.fn == "fit"):
            self._fit.steering.exclude()
            self._fit.steering.phase_changed()

    @override
    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        fit = self._fit
        if fit is None or trainer.state.fn != "fit" or not fit.calls.serving or not fit.stage_validation:
            return
        fetcher = api.eval_data_fetcher(trainer)
        if fetcher is None or not fit.steering.way.staged or api.takes_dataloader_iter(fetcher):
            return
        fit.val.reset()
        fit.calls.start_validation()
        api.install_staging_fetcher(fetcher, fit.val.next, lambda: None)

    @override
    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._fit is not None:
            self._fit.calls.serve(None, None)

    @override
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        fit = self._fit
        if fit is None or not fit.calls.end_validation():
            return
        fetcher = api.eval_data_fetcher(trainer)
        if fetcher is not None:
            api.restore_fetcher(fetcher)
        fit.val.reset()
        fit.hooks.delivered = None
        if fit.val.staged and not fit.calls.eval_hits and fit.stage_validation:
            fit.stage_validation = False
            rank_zero_info("StreamPipeline: `validation_step` used none of the staged outputs; validation batches"
                           " are not staged from now on.")

    # ------------------------------------------------------------------ what it did

    @property
    def pipelined(self) -> bool:
        """Whether batches are staged ahead now (under ``auto``: whether its choice is a pipelined way)."""
        if self.mode == "auto":
            return self._fit is not None and self._fit.steering.pipelined
        return self.mode == "on" and not self._disabled

    @property
    def state(self) -> PipelineState:
        """What the pipeline does now (:class:`~lightning_streamprof.pipeline.state.PipelineState`)."""
        if self._fit is None:
            return PipelineState(self.mode)
        return self._fit.state()

    @property
    def stages_on_thread(self) -> bool:
        """Whether batches may be staged on the staging thread in this fit (the profiler then records it)."""
        return self._fit is not None and self._fit.stager.executor is not None

    @property
    def staged_batches(self) -> int:
        """Training batches handed over staged."""
        return self._fit.train.staged if self._fit is not None else 0

    @property
    def serial_batches(self) -> int:
        """Training batches handed over as the loader gave them."""
        return self._fit.train.serial if self._fit is not None else 0

    @property
    def eval_staged_batches(self) -> int:
        """Validation batches staged before their step."""
        return self._fit.val.staged if self._fit is not None else 0

    @property
    def staged_calls(self) -> list[StagedCall]:
        """The frozen calls that run ahead (found on the first step), with their counts."""
        program = self._fit.calls.program if self._fit is not None else None
        return list(program.calls) if program is not None else []

    @property
    def rounds(self) -> tuple[Round, ...]:
        """``auto``'s rounds of trials so far, oldest first: when each ended, why it ran, its paired comparisons and
        the way it chose (empty outside ``auto`` or before its first choice)."""
        auto = self._fit.steering.auto if self._fit is not None else None
        return tuple(auto.history) if auto is not None else ()

    def report(self) -> str:
        """What the pipeline did, with the measurements behind its decision."""
        if self._disabled or self._fit is None:
            return explain.report(explain.Facts(mode=self.mode, depth=self._options.depth, disabled=self._disabled))
        return explain.report(self._fit.facts())
