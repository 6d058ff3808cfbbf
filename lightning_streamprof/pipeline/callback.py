"""StreamPipeline: prepare batch N+1 on a side CUDA stream while batch N trains."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Literal

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn
from typing_extensions import override

from lightning_streamprof.pipeline.auto import AutoSwitch, check_trial
from lightning_streamprof.pipeline.backbone import (
    BackboneProxy,
    check_frozen,
    default_batch_input,
    find_batch_input,
    frozen_children,
    resolve_backbone,
)
from lightning_streamprof.pipeline.fetcher import restore_class, staging_class
from lightning_streamprof.pipeline.staging import StagedBatch, pin
from lightning_streamprof.pipeline.thread import Fetched, StagingThread

log = logging.getLogger(__name__)
_WAYS = {"inline": "pipelined", "thread": "pipelined on a staging thread",
         "inline+graph": "pipelined, backbone as a CUDA graph",
         "thread+graph": "pipelined on a staging thread, backbone as a CUDA graph"}
_TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def _replace_input(batch: Any, old: torch.Tensor, new: torch.Tensor) -> Any:
    if batch is old:
        return new
    if isinstance(batch, tuple):
        return type(batch)(*(new if b is old else b for b in batch)) if hasattr(batch, "_fields") else tuple(
            new if b is old else b for b in batch
        )
    if isinstance(batch, list):
        return [new if b is old else b for b in batch]
    if isinstance(batch, dict):
        return type(batch)({k: (new if v is old else v) for k, v in batch.items()})
    raise ValueError("StreamPipeline: `augment` needs a batch that is a tensor, a sequence or a mapping")


class StreamPipeline(Callback):
    r"""Overlaps the next batch's host-to-device copy, GPU augmentation and frozen-backbone forward with the
    current training step, on a side CUDA stream. ``training_step`` stays unchanged.

    For batch N+1, while batch N trains: the batch is pinned and copied on the side stream, the module's or
    datamodule's ``on_after_batch_transfer`` (where Lightning users put GPU augmentation) and ``augment``
    run there, then the frozen backbone's forward. The training stream waits for that work with an event and
    takes the memory over with ``record_stream``. The hooks do not run again for that batch on Lightning's
    normal path. The backbone's ``forward`` is replaced (instance attribute; the state dict is unchanged) by
    a proxy that returns the staged output when called with the staged input tensor and computes normally
    for any other input, so results are always correct.

    Results equal serial training when the augmentation draws from its own generator (the transforms of
    :mod:`lightning_streamprof.transforms` take one) and the hooks do not use the global RNG: running batch
    N+1's hook before batch N's step changes the order in which the global RNG is consumed. For the same
    reason ``trainer.global_step`` in those hooks is one less than in serial training.

    ``mode="auto"`` times serial and pipelined steps after ``warmup`` steps (two trials of ``trial`` steps
    each; with CUDA and ``staging_thread=None``, pipelined both on and off the staging thread, and with a
    backbone running ahead and ``cuda_graph=None``, also with the backbone as a CUDA graph) and keeps the
    fastest (pipelined only if each of its trials beats each serial trial by more than 2%), measuring again
    ``recheck`` steps later (an interval that doubles, up to 8x, each time the trials confirm the choice);
    in DDP the timings are averaged over the ranks, so that every rank makes the same choice. A pipelined
    choice whose steady state (timed every 200 steps) falls behind serial's trials by more than 2% hands over
    to serial until the next trials. On CPU the same logic runs in order without streams (``auto`` then stays
    serial). :meth:`report` explains what was done; the decision is logged as ``streampipe/pipelined``,
    ``streampipe/gain``, ``streampipe/threaded`` and ``streampipe/graphed``.

    Args:
        backbone: Frozen submodule to run ahead (dotted name or module). ``None`` finds a frozen child module
            called with a tensor of the batch; ``False`` runs no backbone ahead.
        augment: Callable applied to the batch's input tensor after ``on_after_batch_transfer``, in
            training only (serial or pipelined).
        mode: ``"auto"``, ``"on"`` or ``"off"``.
        backbone_input: Callable picking the backbone's input from the batch (default: found on the first
            batch by watching which batch tensor the backbone is called with; until then, and if it is never
            called with a batch tensor, the backbone runs in the step as usual).
        pin_memory: Pin host tensors before the copy (needed for an asynchronous copy).
        depth: Batches staged ahead (N+1 .. N+depth). More absorbs uneven batch preparation; each staged
            batch (and its backbone output) stays in device memory until its step.
        cuda_graph: Capture the backbone's staged forward as a CUDA graph per input shape (fewer host
            launches; for fixed shapes, without autocast; other shapes, and a forward that cannot be
            captured, run eagerly). ``None``: measured as one more way in ``auto`` (with CUDA and a backbone),
            off in ``on``.
        staging_thread: Stage on a background thread (pinning, hooks, copy and backbone launches leave the
            training loop's thread; the loader is still read by the loop). The thread starts on batch N+1
            when batch N's step reaches ``backward``, where the training thread waits in the autograd engine
            without holding the GIL, and finishes before anything that follows the step. ``None``: with CUDA, on for
            ``mode="on"`` and measured against staging on the loop's thread in ``auto``; off on CPU. Hooks then run outside Lightning's hook dispatch (``self.log`` is not available in them,
            as in serial training) and the batch hooks get profiler ranges of the same names.

    Raises:
        ValueError: At ``setup``, for a backbone with trainable parameters, an unknown submodule or mode.

    Example::

        trainer = Trainer(callbacks=[StreamPipeline(backbone="encoder")])
    """

    def __init__(
        self,
        backbone: str | nn.Module | None | Literal[False] = None,
        augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
        mode: Literal["auto", "on", "off"] = "auto",
        backbone_input: Callable[[Any], torch.Tensor] | None = None,
        pin_memory: bool = True,
        depth: int = 1,
        cuda_graph: bool | None = None,
        staging_thread: bool | None = None,
        warmup: int = 20,
        trial: int = 30,
        recheck: int = 1000,
    ) -> None:
        if mode not in ("auto", "on", "off"):
            raise ValueError(f"StreamPipeline: `mode` must be 'auto', 'on' or 'off', got {mode!r}")
        check_trial(trial)
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"StreamPipeline: `depth` must be an integer >= 1, got {depth!r}")
        self.depth = depth
        self.backbone_spec = backbone
        self.augment = augment
        self.mode = mode
        self.backbone_input = backbone_input
        self.pin_memory = pin_memory
        self.cuda_graph = cuda_graph
        self.staging_thread = staging_thread
        self._executor: StagingThread | None = None
        self._threaded = False  # whether the next batch is staged on the thread
        self._auto_args = dict(warmup=warmup, trial=trial, recheck=recheck)
        self._graph_way: str | None = None  # auto's candidate with the backbone as a CUDA graph
        self._trainer: Trainer | None = None
        self._proxy: BackboneProxy | None = None
        self._backbone_name: str | None = None
        self._probe_hooks: list[Any] = []
        self._stream: torch.cuda.Stream | None = None
        self._cuda = False
        self._slots: deque[StagedBatch | Future[StagedBatch] | Fetched] = deque()  # batches N+1, N+2, ...
        self._delivered: Any = None
        self._exhausted = False
        self._orig_batch_hook: Callable[..., Any] | None = None
        self._auto: AutoSwitch | None = None
        self.staged_batches = 0
        self.serial_batches = 0

    # ------------------------------------------------------------------ set-up

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if self.backbone_spec not in (None, False):
            self._backbone_name, module = resolve_backbone(pl_module, self.backbone_spec)  # type: ignore[arg-type]
            check_frozen(self._backbone_name, module)

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._trainer = trainer
        device = trainer.strategy.root_device
        self._cuda = device.type == "cuda"
        if self._cuda:
            self._stream = torch.cuda.Stream(device=device)
            self._stream.wait_stream(torch.cuda.current_stream(device))
        elif self.mode != "off":
            rank_zero_info("StreamPipeline: no CUDA device; batches are staged in order, without streams.")
        can_thread = self.mode != "off" and (self.staging_thread or (self.staging_thread is None and self._cuda))
        if can_thread:
            self._executor = StagingThread(device)
        self._threaded = bool(can_thread)
        self._graph_way = None
        if self.mode == "auto" and (self._cuda or not _AUTO_NEEDS_CUDA):
            ways: tuple[str, ...] = (
                ("inline", "thread") if self.staging_thread is None else ("thread",) if can_thread else ("inline",))
            if self.cuda_graph is None and self.backbone_spec is not False and self._cuda:
                self._graph_way = f"{ways[-1]}+graph"  # dropped after the first batch if no backbone is found
                ways += (self._graph_way,)
            sync = (lambda: torch.cuda.synchronize(device)) if self._cuda else (lambda: None)
            self._auto = AutoSwitch(candidates=("serial", *ways), sync=sync, reduce=_rank_mean(trainer),
                                    **self._auto_args)
        else:
            self._auto = None
        if self._backbone_name is not None:
            self._install_proxy(pl_module.get_submodule(self._backbone_name))
        elif self.backbone_spec is None:
            self._probe_backbones(pl_module)
        self._orig_batch_hook = pl_module._call_batch_hook
        pl_module._call_batch_hook = self._call_batch_hook  # type: ignore[method-assign]

    def _install_proxy(self, module: nn.Module) -> None:
        if module.training:
            rank_zero_warn(
                f"StreamPipeline: backbone {self._backbone_name!r} is in training mode; its staged forward runs in"
                " that mode (BatchNorm statistics, dropout). Call `.eval()` on it for identical results."
            )
        self._proxy = BackboneProxy(module, cuda_graph=self._cuda and (self.cuda_graph or self._graph_way is not None),
                                    defer_capture=lambda: self._executor is not None and self._executor.inside())
        self._proxy.use_graph = self._cuda and bool(self.cuda_graph)
        if self.backbone_input is None:
            self._probe_input(module)

    def _probe_input(self, module: nn.Module) -> None:
        def hook(mod: nn.Module, args: tuple) -> None:
            if self.backbone_input is None and self._delivered_probe is not None and args:
                self.backbone_input = find_batch_input(self._delivered_probe, args[0])

        self._delivered_probe: Any = None
        self._probe_hooks.append(module.register_forward_pre_hook(hook))

    def _probe_backbones(self, pl_module: LightningModule) -> None:
        """Watch the frozen children on the first batch; the first called with a batch tensor is the backbone."""
        self._delivered_probe = None
        for name, child in frozen_children(pl_module):

            def hook(mod: nn.Module, args: tuple, name: str = name) -> None:
                if self._proxy is not None or self._delivered_probe is None or not args:
                    return
                getter = find_batch_input(self._delivered_probe, args[0])
                if getter is not None:
                    self._backbone_name, self.backbone_input = name, getter
                    self._install_proxy(mod)

            self._probe_hooks.append(child.register_forward_pre_hook(hook))

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        fetcher = trainer.fit_loop._data_fetcher
        if fetcher is None:
            return
        if type(fetcher).__name__.endswith("DataLoaderIterDataFetcher"):
            rank_zero_warn("StreamPipeline: a `training_step` that takes `dataloader_iter` is not pipelined.")
            return
        fetcher.__class__ = staging_class(type(fetcher))
        fetcher._pipeline = self
        self.on_epoch_iter(fetcher)

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._probe_hooks:
            self._delivered_probe = batch

    @override
    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor) -> None:
        if self._executor is not None:
            # the training thread now waits in the autograd engine with the GIL released
            for i, slot in enumerate(self._slots):
                if isinstance(slot, Fetched):
                    self._slots[i] = self._executor.submit(self._stage_on_thread, slot.item)

    @override
    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        # staging overlaps the training step only: validation, checkpoints and epoch ends that follow see
        # no hook of the next batch running (its hooks see the trainer state of a training step)
        for i, slot in enumerate(self._slots):
            self._slots[i] = self._resolve(slot)
        graphed = self._proxy.graphed if self._proxy is not None else None
        if graphed is not None and graphed.pending and self._stream is not None:
            with torch.cuda.stream(self._stream):  # no other thread stages now (see GraphedForward)
                graphed.capture_pending()
        if self._probe_hooks:
            for handle in self._probe_hooks:
                handle.remove()
            self._probe_hooks.clear()
            self._delivered_probe = None
            if self._proxy is None and self.backbone_spec is None:
                rank_zero_info("StreamPipeline: no frozen child module takes the batch input; no backbone runs ahead.")
            if self._proxy is None and self._auto is not None and self._graph_way is not None:
                self._auto.drop(self._graph_way)

    def _resolve(self, slot: Any) -> Any:
        """The staged batch of a slot: staged now if it was only fetched, awaited if it is being staged."""
        if isinstance(slot, Fetched):
            return self._stage_item(slot.item)  # no backward in this step (e.g. a skipped step)
        if isinstance(slot, Future):
            return slot.result()
        return slot

    def _drop_slots(self) -> None:
        slots, self._slots = self._slots, deque()
        for slot in slots:
            if isinstance(slot, Future):
                with contextlib.suppress(Exception):  # a batch that will not be trained
                    slot.result()

    def _shutdown(self) -> None:
        self._drop_slots()
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._shutdown()

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._shutdown()
        fetcher = trainer.fit_loop._data_fetcher
        if fetcher is not None:
            restore_class(fetcher)
        if self._orig_batch_hook is not None:
            pl_module.__dict__.pop("_call_batch_hook", None)
            self._orig_batch_hook = None
        if self._proxy is not None:
            self._proxy.remove()
        self._delivered = None
        self._log_decision(final=True)

    # ------------------------------------------------------------------ the batch path

    def on_epoch_iter(self, fetcher: Any) -> None:
        """A new iterator: nothing staged from the previous one may be delivered."""
        self._drop_slots()
        self._exhausted = False

    def _call_batch_hook(self, hook_name: str, *args: Any) -> Any:
        if args and args[0] is self._delivered and hook_name in _TRANSFER_HOOKS:
            return args[0]  # already transferred and augmented while the previous batch trained
        out = self._hook(hook_name, *args)
        if hook_name == "on_after_batch_transfer" and self.augment is not None and self._trainer is not None:
            if self._trainer.training:
                x = default_batch_input(out)
                out = _replace_input(out, x, self.augment(x))
        return out

    def _hook(self, hook_name: str, *args: Any) -> Any:
        """Lightning's hook call; on the staging thread the hook is called directly, because Lightning's
        dispatch sets ``_current_fx_name`` on the module, which the training thread is using."""
        if self._executor is None or not self._executor.inside():
            assert self._orig_batch_hook is not None
            return self._orig_batch_hook(hook_name, *args)
        trainer = self._trainer
        assert trainer is not None
        selector = trainer._data_connector._datahook_selector
        owner = selector.get_instance(hook_name) if selector is not None else trainer.lightning_module
        kind = "LightningModule" if isinstance(owner, LightningModule) else "LightningDataModule"
        with torch.autograd.profiler.record_function(f"[pl][profile][{kind}]{type(owner).__name__}.{hook_name}"):
            return getattr(owner, hook_name)(*args)

    def next_batch(self, fetcher: Any, base_next: Callable[[Any], Any]) -> Any:
        """Batch N for the loop; batches up to N + ``depth`` staged before returning. Hooks run in batch order."""
        pipelining = self._want_pipelining()
        staged = self._slots.popleft() if self._slots else None
        if staged is None:
            item = base_next(fetcher)  # (batch, batch_idx, dataloader_idx); Lightning's fetch action
            self._exhausted = fetcher.done
            if not pipelining:
                self._delivered = None
                self.serial_batches += 1
                return item
            staged = self._stage_item(item)  # batch N's hooks run before batch N+1's
            batch = staged.hand_over()
        else:
            fetcher._start_profiler()  # the loop's fetch of batch N: waiting for its staging
            try:
                staged = self._resolve(staged)
                batch = staged.hand_over()
            finally:
                fetcher._stop_profiler()
        self._delivered = batch
        if self._proxy is not None:
            self._proxy.serve(staged.backbone_input, staged.backbone_output)
        self.staged_batches += 1
        while pipelining and not self._exhausted and len(self._slots) < self.depth and self._next_allowed():
            self._stage_next(fetcher, base_next)
        fetcher.done = self._exhausted and not self._slots  # no batch after N
        return (batch, *staged.index)

    def _want_pipelining(self) -> bool:
        if self.mode == "off":
            return False
        if self._auto is not None:
            decided, reverted = len(self._auto.history), len(self._auto.reverts)
            choice = self._auto.step()
            if len(self._auto.reverts) > reverted:
                r = self._auto.reverts[-1]
                self._log_decision(gain=r.serial_ms / r.steady_ms - 1.0)
            elif len(self._auto.history) > decided:
                self._log_decision()
                self._release_unused_graphs(choice)
            self._threaded = choice.startswith("thread")
            if self._proxy is not None and self._graph_way is not None:
                self._proxy.use_graph = choice.endswith("+graph")
            return choice != "serial"
        return self.mode == "on"

    def _release_unused_graphs(self, choice: str) -> None:
        """Auto chose a way without the backbone's CUDA graph: free its memory until the next trials."""
        graphed = self._proxy.graphed if self._proxy is not None else None
        if graphed is not None and self._graph_way is not None and not choice.endswith("+graph"):
            if self._stream is not None:
                self._stream.synchronize()  # no replay in flight while its memory pool is freed
            graphed.release()

    def _next_allowed(self) -> bool:
        """Stage the next batch (N + 1 + staged) only if the loop will train on it (none is prepared and dropped)."""
        trainer = self._trainer
        assert trainer is not None
        loop = trainer.fit_loop
        ahead = 2 + len(self._slots)
        ready = loop.epoch_loop.batch_progress.current.ready  # batches before N in this epoch
        if ready + ahead > trainer.num_training_batches:
            return False
        return not (loop.max_steps >= 0 and loop.max_steps - trainer.global_step < ahead)

    def _stage_next(self, fetcher: Any, base_next: Callable[[Any], Any]) -> None:
        trainer = self._trainer
        assert trainer is not None
        start, stop = fetcher._start_profiler, fetcher._stop_profiler
        fetcher._start_profiler = fetcher._stop_profiler = _nothing  # not a step of its own
        try:
            with trainer.profiler.profile("[StreamPipeline].stage_next_batch"):
                item = base_next(fetcher)
                self._exhausted = fetcher.done
                if self._threaded and self._executor is not None:
                    self._slots.append(Fetched(item))  # staged on the thread once the step reaches backward
                else:
                    self._slots.append(self._stage_item(item))
        except StopIteration:
            self._exhausted = True
        finally:
            fetcher._start_profiler, fetcher._stop_profiler = start, stop

    def _stage_on_thread(self, item: tuple) -> StagedBatch:
        with torch.autograd.profiler.record_function("[pl][profile][StreamPipeline].stage_on_thread"):
            return self._stage_item(item)

    def _stage_item(self, item: tuple) -> StagedBatch:
        staged = self._stage(item[0])
        staged.index = tuple(item[1:])
        return staged

    def _stage(self, raw: Any) -> StagedBatch:
        trainer = self._trainer
        assert trainer is not None
        batch = trainer.precision_plugin.convert_input(raw)
        if self._cuda and self.pin_memory:
            batch = pin(batch)
        stream_ctx = torch.cuda.stream(self._stream) if self._cuda else contextlib.nullcontext()
        with stream_ctx:
            batch = self._hook("on_before_batch_transfer", batch, 0)
            batch = trainer.strategy.batch_to_device(batch, dataloader_idx=0)
            staged = StagedBatch(batch)
            if self._proxy is not None and self.backbone_input is not None:
                x = self.backbone_input(batch)
                try:
                    with trainer.precision_plugin.forward_context():
                        staged.backbone_output = self._proxy.compute(x)
                    staged.backbone_input = x
                except Exception as err:  # noqa: BLE001 - the step computes it normally instead
                    rank_zero_warn(f"StreamPipeline: the backbone cannot run ahead ({err}); it runs in the step.")
                    self.backbone_input = None
            if self._cuda:
                staged.ready = torch.cuda.Event()
                staged.ready.record(self._stream)
        return staged

    # ------------------------------------------------------------------ explanation

    @property
    def stages_on_thread(self) -> bool:
        """Whether batches may be staged on the staging thread in this run (the profiler then records it)."""
        return self._executor is not None

    @property
    def pipelined(self) -> bool:
        if self.mode == "auto":
            return self._auto is not None and self._auto.pipelined
        return self.mode == "on"

    def report(self) -> str:
        """What the pipeline did, with the measurements behind its decision."""
        where = "CUDA streams" if self._cuda else "no CUDA device: in order, without streams"
        if self._auto is None and self._threaded:
            where += ", staging thread"
        ahead = f" (up to {self.depth} ahead)" if self.depth > 1 else ""
        lines = [f"StreamPipeline ({self.mode}, {where}): {self.staged_batches} batches staged ahead{ahead},"
                 f" {self.serial_batches} fetched serially"]
        if self._backbone_name is not None:
            hits = self._proxy.hits if self._proxy else 0
            misses = self._proxy.misses if self._proxy else 0
            lines.append(f"  backbone {self._backbone_name!r}: {hits} staged outputs used, {misses} computed in the step")
            graphed = self._proxy.graphed if self._proxy else None
            if graphed is not None:
                failed = f"; not capturable ({graphed.failure})" if graphed.failure else ""
                lines.append(f"  CUDA graph: {graphed.replays} replays, {graphed.eager} eager calls{failed}")
        if self._auto is not None:
            for m in self._auto.history:
                ways = ", ".join(f"{_WAYS.get(c, c)} {ms:.3f}" for c, ms in m.ms.items())
                lines.append(
                    f"  measured ms/step: {ways}; best pipelined {100 * m.gain:+.1f}% (its slowest trial vs the"
                    f" fastest serial one {100 * m.worst_gain(m.best):+.1f}%) -> {_WAYS.get(m.choice, m.choice)}"
                )
            for r in self._auto.reverts:
                lines.append(
                    f"  steady state: {_WAYS.get(r.way, r.way)} {r.steady_ms:.3f} ms/step, slower than serial's"
                    f" {r.serial_ms:.3f} -> serial until the next trials"
                )
        return "\n".join(lines)

    def _log_decision(self, final: bool = False, gain: float | None = None) -> None:
        """Log the current choice; ``gain`` is the measured gain behind it (default: the last trials')."""
        if self._auto is None or not self._auto.history or self._trainer is None:
            return
        gain = self._auto.history[-1].gain if gain is None else gain
        metrics = {"streampipe/pipelined": float(self._auto.pipelined), "streampipe/gain": gain,
                   "streampipe/threaded": float(self._auto.choice.startswith("thread")),
                   "streampipe/graphed": float(self._auto.choice.endswith("+graph"))}
        for logger in self._trainer.loggers:
            logger.log_metrics(metrics, step=self._trainer.global_step)
        if final:
            rank_zero_info(self.report())


def _nothing() -> None:
    pass


#: ``auto`` measures only with CUDA (without streams nothing overlaps); tests of its DDP logic lift this on CPU
_AUTO_NEEDS_CUDA = True


def _rank_mean(trainer: Trainer) -> Callable[[list[float]], list[float]]:
    """Averages over the ranks (a collective: every rank calls it at the same step), so all ranks choose alike."""
    if trainer.world_size <= 1:
        return lambda values: values

    def mean(values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=trainer.strategy.root_device)
        return trainer.strategy.reduce(tensor, reduce_op="mean").tolist()

    return mean
