"""StreamPipeline: prepare batch N+1 on a side CUDA stream while batch N trains."""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Literal

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn
from typing_extensions import override

from lightning_streamprof.names import STAGE_NEXT_BATCH_ACTION, pl_range
from lightning_streamprof.pipeline import explain
from lightning_streamprof.pipeline import lightning_api as api
from lightning_streamprof.pipeline import tree
from lightning_streamprof.pipeline.auto import AutoSwitch, check_trial
from lightning_streamprof.pipeline.derivation import UserInput, amp_state
from lightning_streamprof.pipeline.frozen import check_frozen, frozen_modules, resolve
from lightning_streamprof.pipeline.graph import GraphedForward
from lightning_streamprof.pipeline.probe import CallProbe, Findings
from lightning_streamprof.pipeline.program import Arg, Program, StagedCall
from lightning_streamprof.pipeline.proxy import CallProxies
from lightning_streamprof.pipeline.staging import StagedBatch, Stager
from lightning_streamprof.pipeline.thread import Fetched
from lightning_streamprof.pipeline.way import SERIAL, Way, candidate_ways

_TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")
#: pipelined steps after which a staged call that never served its output is reported
_SILENT_AFTER = 20
BackboneSpec = str | nn.Module


def default_batch_input(batch: Any) -> torch.Tensor:
    """The first tensor of a batch: the tensor itself, ``batch[0]`` or the first tensor value of a dict."""
    leaves = tree.leaves_with_paths(batch)
    if leaves and len(leaves[0][0]) <= 1:
        return leaves[0][1]
    raise ValueError("StreamPipeline: cannot tell which tensor of the batch `augment` takes")


def _replace_input(batch: Any, old: torch.Tensor, new: torch.Tensor) -> Any:
    if batch is old:
        return new
    if isinstance(batch, tuple):
        items = tuple(new if b is old else b for b in batch)
        return type(batch)(*items) if hasattr(batch, "_fields") else items
    if isinstance(batch, list):
        return [new if b is old else b for b in batch]
    if isinstance(batch, dict):
        return type(batch)({k: (new if v is old else v) for k, v in batch.items()})
    raise ValueError("StreamPipeline: `augment` needs a batch that is a tensor, a sequence or a mapping")


def _check_count(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"StreamPipeline: `{name}` must be an integer >= {least}, got {value!r}")


class StreamPipeline(Callback):
    r"""Overlaps the next batch's host-to-device copy, GPU augmentation and frozen modules' forward with the
    current training step, on a side CUDA stream. ``training_step`` stays unchanged.

    For batch N+1, while batch N trains: the batch is pinned and copied on the side stream, the module's or
    datamodule's ``on_after_batch_transfer`` (where Lightning users put GPU augmentation) and ``augment``
    run there, then the frozen calls. The training stream waits for that work with an event and takes the
    memory over with ``record_stream``. The hooks do not run again for that batch on Lightning's normal path.
    Validation batches inside ``fit`` are staged the same way (on the loop's thread), as long as
    ``validation_step`` uses their staged outputs.

    The frozen calls are found on the first training step: every call of a frozen module (any depth; a
    ``torch.compile`` wrapper included) through ``forward``/``__call__`` or another method of its own
    (``forward_features``, ``forward_head``, ``encode``, ``get_image_features``, ...) whose arguments,
    positional or keyword, are made from the batch (tensors, token ids, masks) or from an earlier frozen call's
    output, by deterministic operations (dtype conversions, scaling and normalisation, indexing, reshaping,
    interpolation, ...). Those calls are staged, in the step's order (``forward_head(forward_features(x))`` is
    one staged unit), under the autocast state they ran in; their outputs, of any structure (tensors,
    tuples, dicts, dataclasses, ``ModelOutput``), reach the step through the module's method, replaced on the
    instance (the state dict is unchanged): a call with the staged arguments gets the staged output, any other
    call computes normally. The first steps check the staged arguments and outputs against the step's own (a
    mismatch warns once and computes that call in the step from then on). A frozen call that cannot be staged
    (an argument made by a random draw, from trainable weights, or a call that draws random numbers itself) is
    named in one warning with the reason and the fix; a run that serves no staged output says so.

    Results equal serial training when the augmentation draws from its own generator (the transforms of
    :mod:`lightning_streamprof.transforms` take one) and the hooks do not use the global RNG: running batch
    N+1's hook before batch N's step changes the order in which the global RNG is consumed. Frozen calls that
    draw random numbers are not staged, and random draws on their outputs (``latent_dist.sample()``) stay in the
    step, so they consume the RNG as in serial training. ``trainer.global_step`` in the batch hooks is one less
    than in serial training.

    ``mode="auto"`` times serial and pipelined steps after ``warmup`` steps (trials of ``trial`` steps: serial,
    pipelined on the loop's thread, on the staging thread, and with frozen calls found and ``cuda_graph=None``,
    the calls as a CUDA graph) and keeps the fastest (pipelined only if it beats serial on average by more
    than 2% and each of its trials beats each serial trial); a way that loses clearly is cut short and sits out
    later rounds. It measures again ``recheck`` steps later (an interval that doubles, up to 8x, while the
    trials confirm the choice), and watches the chosen way every 200 steps (slower than serial's trials by more
    than 2%: serial until the next trials). In DDP the timings are averaged over the ranks, so that every rank
    makes the same choice. On CPU the same logic runs in order without streams (``auto`` then stays serial).
    ``mode="on"`` stages on the staging thread with the frozen calls as a CUDA graph (with CUDA; eagerly, and
    saying why, where the graph cannot be captured or differs from eager). :meth:`report` explains what was
    done; the decision is logged as ``streampipe/pipelined``, ``streampipe/gain``, ``streampipe/threaded`` and
    ``streampipe/graphed``.

    Args:
        backbone: Frozen submodule(s) whose calls run ahead (a dotted name, a module, or a list of them).
            ``None`` finds every frozen module the step calls with arguments made from the batch; ``False`` runs
            no frozen call ahead.
        augment: Callable applied to the batch's input tensor after ``on_after_batch_transfer``, in
            training only (serial or pipelined).
        mode: ``"auto"``, ``"on"`` or ``"off"``.
        backbone_input: Callable making the (single) ``backbone``'s input from the (transferred) batch; its
            ``forward`` is then staged with that input. Default: found on the first step.
        pin_memory: Pin host tensors before the copy (needed for an asynchronous copy).
        depth: Batches staged ahead (N+1 .. N+depth). More absorbs uneven batch preparation; each staged
            batch (and its frozen outputs) stays in device memory until its step.
        cuda_graph: Capture the staged frozen calls as one CUDA graph per input shape (fewer host launches;
            also under Lightning's mixed precision; other shapes, and calls that cannot be captured, run
            eagerly). ``None``: on with ``mode="on"``, measured as one more way in ``auto`` (with CUDA and
            frozen calls).
        staging_thread: Stage on a background thread (pinning, hooks, copy and launches leave the training
            loop's thread; the loader is still read by the loop). The thread starts on batch N+1 when batch N's
            step reaches ``backward``, where the training thread waits in the autograd engine without holding the
            GIL, and finishes before anything that follows the step. ``None``: with CUDA, on for ``mode="on"`` and
            measured against staging on the loop's thread in ``auto``; off on CPU. Hooks then run outside
            Lightning's hook dispatch (``self.log`` is not available in them, as in serial training) and the batch
            hooks get profiler ranges of the same names.
        warmup: Steps before ``auto``'s first trials.
        trial: Steps per trial (the first 3 are not timed).
        recheck: Steps from a decision to the next trials.

    Raises:
        ValueError: At construction for arguments out of range; at ``setup``, for a backbone with trainable
            parameters or an unknown submodule, or a second ``StreamPipeline`` in the Trainer.

    Example::

        trainer = Trainer(callbacks=[StreamPipeline()])  # finds the frozen calls
    """

    def __init__(
        self,
        backbone: BackboneSpec | list[BackboneSpec] | tuple[BackboneSpec, ...] | None | Literal[False] = None,
        augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
        mode: Literal["auto", "on", "off"] = "auto",
        backbone_input: Callable[[Any], torch.Tensor] | None = None,
        pin_memory: bool = True,
        depth: int = 1,
        cuda_graph: bool | None = None,
        staging_thread: bool | None = None,
        warmup: int = 10,
        trial: int = 30,
        recheck: int = 1000,
    ) -> None:
        if mode not in ("auto", "on", "off"):
            raise ValueError(f"StreamPipeline: `mode` must be 'auto', 'on' or 'off', got {mode!r}")
        if augment is not None and not callable(augment):
            raise ValueError(f"StreamPipeline: `augment` must be callable, got {augment!r}")
        if backbone_input is not None and not callable(backbone_input):
            raise ValueError(f"StreamPipeline: `backbone_input` must be callable, got {backbone_input!r}")
        specs = _backbone_specs(backbone)
        if backbone_input is not None and (specs is None or len(specs) != 1):
            raise ValueError("StreamPipeline: `backbone_input` needs one `backbone` (the module it is the input of)")
        check_trial(trial)
        _check_count("depth", depth, 1)
        _check_count("warmup", warmup, 0)
        _check_count("recheck", recheck, 1)
        self.backbone_spec = backbone
        self._specs = specs  # None: find them; []: none
        self.augment = augment
        self.mode = mode
        self.backbone_input = backbone_input
        self.pin_memory = pin_memory
        self.depth = depth
        self.cuda_graph = cuda_graph
        self.staging_thread = staging_thread
        self._auto_args = dict(warmup=warmup, trial=trial, recheck=recheck)
        self._trainer: Trainer | None = None
        self._stager: Stager | None = None
        self._probe: CallProbe | None = None
        self._program: Program | None = None
        self._proxies: CallProxies | None = None
        self._auto: AutoSwitch | None = None
        self._way: Way = SERIAL
        self._delivered: Any = None
        self._exhausted = False
        self._orig_batch_hook: Callable[..., Any] | None = None
        self._disabled: str | None = None
        self._not_staged: list[str] = []
        self._graph_way: str | None = None
        self._warned_silent: set[int] = set()
        self._probe_batch: Any = None
        self._eval_slots: deque[StagedBatch] = deque()
        self._eval_exhausted = False
        self._eval_staging = True  # off once a validation run used none of its staged outputs
        self.staged_batches = 0
        self.serial_batches = 0
        self.eval_staged_batches = 0

    # ------------------------------------------------------------------ set-up

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        pipelines = [cb for cb in trainer.callbacks if isinstance(cb, StreamPipeline)]
        if stage == "fit" and len(pipelines) > 1:
            raise ValueError(f"StreamPipeline: the Trainer has {len(pipelines)} StreamPipeline callbacks; each would"
                             " stage the batches, one of them for nothing. Keep one (a config's `trainer.callbacks`"
                             " and `--trainer.callbacks+=` add up).")
        if stage == "fit" and self._specs:
            for spec in self._specs:
                check_frozen(*resolve(pl_module, spec))

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._trainer = trainer
        self._disabled = api.unsupported_reason() if self.mode != "off" else None
        if self._disabled:
            rank_zero_warn(f"StreamPipeline: {self._disabled}; training runs serially.")
            return
        device = trainer.strategy.root_device
        cuda = device.type == "cuda"
        if not cuda and self.mode != "off":
            rank_zero_info("StreamPipeline: no CUDA device; batches are staged in order, without streams.")
        thread = self.mode != "off" and bool(self.staging_thread or (self.staging_thread is None and cuda))
        precision = trainer.precision_plugin
        self._stager = Stager(device, self.pin_memory, thread, convert=precision.convert_input,
                              before=lambda b, i: self._hook("on_before_batch_transfer", b, i),
                              transfer=lambda b, i: trainer.strategy.batch_to_device(b, dataloader_idx=i))
        graph = cuda and self.cuda_graph is not False
        self._way = Way(staged=True, thread=thread, graph=graph) if self.mode == "on" else SERIAL
        self._auto = None
        watched = self._watched(pl_module) if self.mode != "off" else []  # "off": nothing is watched or replaced
        if self.backbone_input is not None and self.mode != "off":
            name, module = watched[0]
            with precision.forward_context():
                amp = amp_state(device.type)
            call = StagedCall(0, name, "forward", module, module.forward, tree.flatten(((torch.empty(0),), {}))[0],
                              (Arg("equal", UserInput(self.backbone_input)),), amp)
            self._install(Program([call], amp=amp))
        elif watched:
            self._probe = CallProbe(watched, refuse_sharded=cuda)
        self._start_auto_if_ready()
        self._orig_batch_hook = api.replace_batch_hook(pl_module, self._call_batch_hook)

    def _watched(self, pl_module: LightningModule) -> list[tuple[str, nn.Module]]:
        if self._specs is None:
            return frozen_modules(pl_module)
        return [resolve(pl_module, spec) for spec in self._specs]

    def _install(self, program: Program) -> None:
        stager = self._stager
        assert stager is not None
        for module, name in {id(c.module): (c.module, c.name) for c in program.calls}.values():
            if module.training:
                rank_zero_warn(
                    f"StreamPipeline: frozen module {name!r} is in training mode; its staged calls run in that mode"
                    " (BatchNorm statistics). Call `.eval()` on it for identical results."
                )
        if stager.cuda and self.cuda_graph is not False:
            program.graph = GraphedForward(program.graph_forward, defer=stager.inside_thread,
                                           on_failure=program.graph_failed)
        self._program = program
        self._proxies = CallProxies(program)
        stager.program = program
        stager.use_graph = self._way.graph

    def _start_auto_if_ready(self) -> None:
        """Auto's ways are known once the frozen calls are (the graph way needs them)."""
        trainer, stager = self._trainer, self._stager
        if self.mode != "auto" or self._probe is not None or trainer is None or stager is None:
            return
        if not (stager.cuda or not _AUTO_NEEDS_CUDA):
            return
        threaded = stager.executor is not None
        graphable = self._program is not None and self._program.graph is not None
        ways = candidate_ways(inline=self.staging_thread is not True, thread=threaded,
                              graph=self.cuda_graph if graphable else False)
        sync = (lambda: torch.cuda.synchronize(trainer.strategy.root_device)) if stager.cuda else (lambda: None)
        self._auto = AutoSwitch(ways, sync=sync, clock=time.perf_counter, reduce=_rank_mean(trainer),
                                **self._auto_args)

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        fetcher = api.data_fetcher(trainer)
        if fetcher is None or self._disabled or self._stager is None:
            return
        if api.takes_dataloader_iter(fetcher):
            rank_zero_warn("StreamPipeline: a `training_step` that takes `dataloader_iter` is not pipelined.")
            return
        api.install_staging_fetcher(fetcher, self.next_batch, self.on_epoch_iter)
        self.on_epoch_iter(fetcher)
        self._not_training()  # the epoch's first fetch may start the loader's workers

    # ------------------------------------------------------------------ around each step

    def _not_training(self) -> None:
        """The step now running does more than train (validation, a checkpoint, an epoch's end, a profiler's
        window): ``auto`` leaves it out of its timings."""
        if self._auto is not None:
            self._auto.exclude()

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._probe is not None and not self._probe.watching:
            self._probe.start(batch)
            self._probe_batch = batch
        if self._auto is not None and api.profiler_busy(trainer):
            self._not_training()

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.training or trainer.state.fn == "fit":
            self._not_training()

    # ------------------------------------------------------------------ validation inside fit

    @override
    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Validation batches are staged like training batches (on the loop's thread: no backward to overlap with),
        their frozen calls as the training step's, while the pipeline runs a staged way."""
        fetcher = api.eval_data_fetcher(trainer) if trainer.state.fn == "fit" else None
        if (fetcher is None or self._stager is None or self._proxies is None or not self._way.staged
                or not self._eval_staging or api.takes_dataloader_iter(fetcher)):
            return
        self._eval_slots.clear()
        self._eval_exhausted = False
        self._proxies.evaluating = True
        api.install_staging_fetcher(fetcher, self.next_eval_batch, lambda f: None)

    @override
    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._proxies is not None:
            self._proxies.serve(None, None)

    @override
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        proxies = self._proxies
        if proxies is None or not proxies.evaluating:
            return
        proxies.evaluating = False
        fetcher = api.eval_data_fetcher(trainer)
        if fetcher is not None:
            api.restore_fetcher(fetcher)
        self._eval_slots.clear()
        self._delivered = None
        if self.eval_staged_batches and not sum(proxies.eval_hits.values()) and self._eval_staging:
            self._eval_staging = False
            rank_zero_info("StreamPipeline: `validation_step` used none of the staged outputs; validation batches"
                           " are not staged from now on.")

    def next_eval_batch(self, fetcher: Any, base_next: Callable[[Any], Any]) -> Any:
        """Validation batch N for the loop, N+1 staged before it returns (in order, on the loop's thread)."""
        stager, proxies = self._stager, self._proxies
        assert stager is not None and proxies is not None
        if self._eval_slots:
            with api.fetch_profiled(fetcher):
                staged = self._eval_slots.popleft()
        else:
            item = base_next(fetcher)  # StopIteration ends the run
            self._eval_exhausted = fetcher.done
            staged = stager.stage(item)
        batch = staged.hand_over()
        self._delivered = batch
        proxies.serve(batch, staged.run)
        self.eval_staged_batches += 1
        if not self._eval_exhausted:
            try:
                with api.fetch_unprofiled(fetcher):
                    item = base_next(fetcher)
                self._eval_exhausted = fetcher.done
                self._eval_slots.append(stager.stage(item))
            except StopIteration:
                self._eval_exhausted = True
        fetcher.done = self._eval_exhausted and not self._eval_slots
        return (batch, *staged.index)

    @override
    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        self._not_training()

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._not_training()

    @override
    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor) -> None:
        self._finish_probe()
        if self._stager is not None and self._stager.executor is not None:
            self._stager.start_fetched()  # the training thread now waits in the autograd engine, GIL released

    @override
    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        stager = self._stager
        if stager is None:
            return
        if self._auto is not None and api.profiler_busy(trainer):
            self._not_training()
        # staging overlaps the training step only: validation, checkpoints and epoch ends that follow see
        # no hook of the next batch running (its hooks see the trainer state of a training step)
        stager.resolve_all()
        self._finish_probe()
        program, proxies = self._program, self._proxies
        if program is None or proxies is None:
            return
        proxies.serve(None, None)  # an output not used in its own step is never served later
        graphed = program.graph
        if graphed is not None and program.stale:
            stager.wait_idle()  # no replay in flight while its memory pool is freed
            graphed.release()  # captured again without the calls that stopped
            program.stale = False
        if graphed is not None and graphed.pending and stager.stream is not None:
            with torch.cuda.stream(stager.stream):  # no other thread stages now (see GraphedForward)
                graphed.capture_pending()
        self._warn_if_silent(program)

    def _finish_probe(self) -> None:
        probe, stager = self._probe, self._stager
        if probe is None or not probe.watching or stager is None:
            return
        findings = probe.stop()
        self._probe = None
        batch, self._probe_batch = self._probe_batch, None
        self._explain_findings(findings)
        program = findings.program
        if program is not None:
            self._install(program)
            if program.graph is not None and (self._way.graph or (self.mode == "auto" and self.cuda_graph is None)):
                self._capture_graph_ahead(program, stager, batch)
            for slot in stager.slots:  # batches staged before the calls were known
                if isinstance(slot, StagedBatch):
                    stager.add_calls(slot)
        self._start_auto_if_ready()

    def _capture_graph_ahead(self, program: Program, stager: Stager, batch: Any) -> None:
        """Capture the calls' graph as soon as the first step has found them, from that step's batch, on the
        training thread: the graph's first use (the first batch staged on the staging thread, or auto's trial)
        replays, never runs eagerly on the staging thread (where cuDNN would tune every convolution again)."""
        graphed = program.graph
        if graphed is None or stager.stream is None or not program.roots:
            return
        try:
            roots = program.root_values(batch)
        except Exception:  # noqa: BLE001 - the graph is captured when first used instead
            return
        stager.stream.wait_stream(torch.cuda.current_stream())
        for t in roots:
            t.record_stream(stager.stream)
        with torch.cuda.stream(stager.stream):
            graphed.prepare(*roots)
        if self.mode == "on" and self._way.graph:
            self._graph_way = ("the staged calls replay a CUDA graph (checked equal to eager)" if graphed.captured
                               else f"the staged calls run eagerly: {graphed.failure or 'no graph was captured'}")
            rank_zero_info(f"StreamPipeline (on): {self._graph_way}.")

    def _explain_findings(self, found: Findings) -> None:
        """One warning per frozen call that cannot be staged; one info line when there is nothing to stage."""
        named = self._specs is not None
        for label, (why, fix) in found.refused.items():
            self._not_staged.append(f"`{label}` {why}")
            rank_zero_warn(f"StreamPipeline: `{label}` {why}; it runs in the step. {fix}".rstrip())
        for label, why in found.unrelated.items():
            self._not_staged.append(f"`{label}` {why}")
            if named:
                rank_zero_warn(f"StreamPipeline: `{label}` {why}: nothing of it can be staged.")
        if named:
            assert self._trainer is not None
            for spec in self._specs or ():
                name = resolve(self._trainer.lightning_module, spec)[0]
                if name not in found.called:
                    self._not_staged.append(f"backbone {name!r} is not called in the first training step")
                    rank_zero_warn(f"StreamPipeline: backbone {name!r} is not called in the first training step;"
                                   " nothing of it is staged.")
        elif found.program is None and not found.refused:
            if found.unrelated:
                text = "; ".join(f"`{label}` {why}" for label, why in found.unrelated.items())
                rank_zero_info(f"StreamPipeline: no frozen call is staged: {text}.")
            else:
                self._not_staged.append("the training step calls no frozen module")
                rank_zero_info("StreamPipeline: the training step calls no frozen module; only the batch is staged.")

    def _warn_if_silent(self, program: Program) -> None:
        if self.staged_batches < _SILENT_AFTER or (self._auto is not None and not self._auto.pipelined):
            return
        for call in program.calls:
            if call.hits or not call.active or call.index in self._warned_silent:
                continue
            self._warned_silent.add(call.index)
            rank_zero_warn(f"StreamPipeline: `{call.label}` served no staged output in {self.staged_batches}"
                           " pipelined steps: `training_step` never called it with the staged arguments.")

    def _shutdown(self) -> None:
        if self._probe is not None and self._probe.watching:
            self._probe.stop()
        if self._stager is not None:
            self._stager.shutdown()

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._shutdown()
        if self._proxies is not None:
            self._proxies.remove()

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._shutdown()
        fetcher = api.data_fetcher(trainer)
        if fetcher is not None:
            api.restore_fetcher(fetcher)
        if self._orig_batch_hook is not None:
            api.restore_batch_hook(pl_module)
            self._orig_batch_hook = None
        if self._proxies is not None:
            self._proxies.remove()
        self._delivered = None
        self._log_decision(final=True)

    # ------------------------------------------------------------------ the batch path

    def on_epoch_iter(self, fetcher: Any) -> None:
        """A new iterator: nothing staged from the previous one may be delivered."""
        if self._stager is not None:
            self._stager.drop()
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
        if self._stager is None or not self._stager.inside_thread():
            assert self._orig_batch_hook is not None
            return self._orig_batch_hook(hook_name, *args)
        assert self._trainer is not None
        owner = api.hook_owner(self._trainer, hook_name)
        kind = "LightningModule" if isinstance(owner, LightningModule) else "LightningDataModule"
        with torch.autograd.profiler.record_function(pl_range(f"[{kind}]{type(owner).__name__}.{hook_name}")):
            return getattr(owner, hook_name)(*args)

    def next_batch(self, fetcher: Any, base_next: Callable[[Any], Any]) -> Any:
        """Batch N for the loop; batches up to N + ``depth`` staged before returning. Hooks run in batch order."""
        stager = self._stager
        assert stager is not None
        way = self._next_way()
        staged = stager.slots.popleft() if stager.slots else None
        if staged is None:
            item = self._fetch(fetcher, base_next)  # Lightning's fetch action
            self._exhausted = fetcher.done
            if not way.staged:
                self._delivered = None
                self.serial_batches += 1
                return item
            staged = stager.stage(item)  # batch N's hooks run before batch N+1's
            batch = staged.hand_over()
        else:
            with api.fetch_profiled(fetcher):  # the loop's fetch of batch N: waiting for its staging
                staged = stager.resolve(staged)
                batch = staged.hand_over()
        self._delivered = batch
        if self._proxies is not None:
            self._proxies.serve(batch, staged.run)
        self.staged_batches += 1
        while way.staged and not self._exhausted and len(stager.slots) < self.depth and self._next_allowed():
            self._stage_next(fetcher, base_next, way)
        fetcher.done = self._exhausted and not stager.slots  # no batch after N
        return (batch, *staged.index)

    def _fetch(self, fetcher: Any, base_next: Callable[[Any], Any]) -> tuple:
        """(batch, batch_idx, dataloader_idx) from the loader; auto is told how long the loop waited."""
        if self._auto is None:
            return base_next(fetcher)
        t0 = time.perf_counter()
        try:
            return base_next(fetcher)
        finally:
            self._auto.waited(time.perf_counter() - t0)

    def _next_way(self) -> Way:
        if self.mode == "off":
            return SERIAL
        auto = self._auto
        if auto is not None:
            decided, reverted = len(auto.history), len(auto.reverts)
            way = auto.step()
            if len(auto.reverts) > reverted:
                r = auto.reverts[-1]
                self._log_decision(gain=r.serial_ms / r.way_ms - 1.0)
            elif len(auto.history) > decided:
                self._log_decision()
                self._release_unused_graph(way)
            self._way = way
        elif self.mode == "auto":
            self._way = SERIAL  # until auto's ways are known (or without CUDA)
        if self._stager is not None:
            self._stager.use_graph = self._way.graph
        return self._way

    def _release_unused_graph(self, way: Way) -> None:
        """Auto chose a way without the calls' CUDA graph: free its memory until the next trials."""
        graphed = self._program.graph if self._program is not None else None
        if graphed is not None and not way.graph and self._stager is not None:
            self._stager.wait_idle()  # no replay in flight while its memory pool is freed
            graphed.release()

    def _next_allowed(self) -> bool:
        """Stage the next batch (N + 1 + staged) only if the loop will train on it (none is prepared and dropped)."""
        trainer, stager = self._trainer, self._stager
        assert trainer is not None and stager is not None
        ahead = 2 + len(stager.slots)
        if api.batches_started(trainer) + ahead > trainer.num_training_batches:
            return False
        max_steps = trainer.fit_loop.max_steps
        return not (max_steps >= 0 and max_steps - trainer.global_step < ahead)

    def _stage_next(self, fetcher: Any, base_next: Callable[[Any], Any], way: Way) -> None:
        trainer, stager = self._trainer, self._stager
        assert trainer is not None and stager is not None
        try:
            with api.fetch_unprofiled(fetcher), trainer.profiler.profile(STAGE_NEXT_BATCH_ACTION):
                item = self._fetch(fetcher, base_next)
                self._exhausted = fetcher.done
                if way.thread and stager.executor is not None:
                    stager.slots.append(Fetched(item))  # staged on the thread once the step reaches backward
                else:
                    stager.slots.append(stager.stage(item))
        except StopIteration:
            self._exhausted = True

    # ------------------------------------------------------------------ explanation

    @property
    def stages_on_thread(self) -> bool:
        """Whether batches may be staged on the staging thread in this run (the profiler then records it)."""
        return self._stager is not None and self._stager.executor is not None

    @property
    def pipelined(self) -> bool:
        if self.mode == "auto":
            return self._auto is not None and self._auto.pipelined
        return self.mode == "on" and not self._disabled

    def report(self) -> str:
        """What the pipeline did, with the measurements behind its decision."""
        return explain.report(explain.Facts(
            mode=self.mode, cuda=self._stager is not None and self._stager.cuda,
            way=None if self.mode == "auto" else self._way, depth=self.depth, staged_batches=self.staged_batches,
            serial_batches=self.serial_batches, program=self._program,
            misses=dict(self._proxies.misses) if self._proxies is not None else None,
            eval_batches=self.eval_staged_batches,
            eval_hits=sum(self._proxies.eval_hits.values()) if self._proxies is not None else 0,
            not_staged=self._not_staged, disabled=self._disabled, auto=self._auto, graph_way=self._graph_way))

    @property
    def staged_calls(self) -> list[StagedCall]:
        """The frozen calls that run ahead (found on the first step), with their counts."""
        return list(self._program.calls) if self._program is not None else []

    def _log_decision(self, final: bool = False, gain: float | None = None) -> None:
        """Log the current choice; ``gain`` is the measured gain behind it (default: the last trials')."""
        if self._trainer is None or self._auto is None or not self._auto.history:
            return
        metrics = explain.decision_metrics(self._auto, gain)
        for logger in self._trainer.loggers:
            logger.log_metrics(metrics, step=self._trainer.global_step)
        if final:
            rank_zero_info(self.report())


#: ``auto`` measures only with CUDA (without streams nothing overlaps); tests of its logic lift this on CPU
_AUTO_NEEDS_CUDA = True


def _backbone_specs(backbone: Any) -> list[BackboneSpec] | None:
    """The named frozen modules (``None``: find them; ``[]``: none)."""
    if backbone is None:
        return None
    if backbone is False:
        return []
    specs = list(backbone) if isinstance(backbone, (list, tuple)) else [backbone]
    if not specs or not all(isinstance(s, (str, nn.Module)) for s in specs):
        raise ValueError(f"StreamPipeline: `backbone` must be a submodule name, a module, a list of them, None or"
                         f" False, got {backbone!r}")
    return specs


def _rank_mean(trainer: Trainer) -> Callable[[list[float]], list[float]]:
    """Averages over the ranks (a collective: every rank calls it at the same step), so all ranks choose alike."""
    if trainer.world_size <= 1:
        return lambda values: values

    def mean(values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=trainer.strategy.root_device)
        return trainer.strategy.reduce(tensor, reduce_op="mean").tolist()

    return mean
