"""The parts of StreamPipeline that live through one ``fit``, made together when training starts: the stager,
the batch hooks, the frozen calls, the way each batch runs, and a staging fetcher for each loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from lightning_streamprof.names import STAGE_NEXT_BATCH_ACTION
from lightning_streamprof.pipeline import explain
from lightning_streamprof.pipeline import lightning_api as api
from lightning_streamprof.pipeline.calls import FrozenCalls, given_program
from lightning_streamprof.pipeline.derivation import amp_state
from lightning_streamprof.pipeline.fetcher import StagingFetcher
from lightning_streamprof.pipeline.frozen import frozen_modules, resolve
from lightning_streamprof.pipeline.hooks import BatchHooks
from lightning_streamprof.pipeline.options import Options
from lightning_streamprof.pipeline.program import StagedRun
from lightning_streamprof.pipeline.stager import Stager
from lightning_streamprof.pipeline.state import PipelineState
from lightning_streamprof.pipeline.steering import Steering
from lightning_streamprof.pipeline.way import INLINE, SERIAL, Way, candidate_ways


@dataclass(eq=False)
class Fit:
    """``train`` stages the training batches, ``val`` the validation batches inside ``fit`` (on the loop's thread:
    there is no backward to overlap with) while ``stage_validation`` (off once a validation run used none of its
    staged outputs)."""

    options: Options
    stager: Stager
    hooks: BatchHooks
    calls: FrozenCalls
    steering: Steering
    train: StagingFetcher
    val: StagingFetcher
    stage_validation: bool = True

    @classmethod
    def start(cls, options: Options, trainer: Trainer, pl_module: LightningModule) -> Fit:
        """The parts, made when training starts (the module's batch-hook dispatch is routed through them)."""
        device = trainer.strategy.root_device
        cuda, on = device.type == "cuda", options.mode != "off"
        if not cuda and on:
            rank_zero_info("StreamPipeline: no CUDA device; batches are staged in order, without streams.")
        thread = on and bool(options.staging_thread or (options.staging_thread is None and cuda))
        precision = trainer.precision_plugin
        hooks = BatchHooks(trainer, pl_module, options.augment)
        stager = Stager(device, options.pin_memory, thread, convert=precision.convert_input,
                        before=hooks.before_transfer,
                        transfer=lambda b, i: trainer.strategy.batch_to_device(b, dataloader_idx=i))
        graph = cuda and options.cuda_graph is not False
        way = Way(staged=True, thread=thread, graph=graph) if options.mode == "on" else SERIAL
        calls = FrozenCalls(stager, pl_module, options.specs, options.cuda_graph,
                            capture_ahead=way.graph or (options.mode == "auto" and options.cuda_graph is None),
                            announce_graph=options.mode == "on")
        watched = _watched(pl_module, options) if on else []  # "off": nothing is watched or replaced
        if options.backbone_input is not None and on:
            name, module = watched[0]
            with precision.forward_context():
                amp = amp_state(device.type)
            calls.install(given_program(name, module, options.backbone_input, amp))
        elif watched:
            calls.find_in_first_step(watched, refuse_sharded=cuda)
        steering = Steering(way, trainer, calls.release_unused_graph)

        def deliver(batch: Any, run: StagedRun | None) -> None:
            hooks.delivered = batch
            calls.serve(batch, run)

        def next_way() -> Way:
            chosen = steering.next()
            stager.use_graph = chosen.graph
            return chosen

        train = StagingFetcher(stager, options.depth, next_way, deliver,
                               may_read_ahead=lambda ahead: _trains_on(trainer, ahead),
                               scope=lambda: trainer.profiler.profile(STAGE_NEXT_BATCH_ACTION))
        val = StagingFetcher(stager, 1, lambda: INLINE, deliver)
        fit = cls(options, stager, hooks, calls, steering, train, val)
        fit.start_auto_if_ready()
        return fit

    def start_auto_if_ready(self) -> None:
        """Auto's ways are known once the frozen calls are (the graph way needs them); it measures only where
        staging overlaps the step."""
        options, stager, calls = self.options, self.stager, self.calls
        if options.mode != "auto" or calls.probe is not None or not stager.overlaps:
            return
        graphable = calls.program is not None and calls.program.graph is not None
        ways = candidate_ways(inline=options.staging_thread is not True, thread=stager.executor is not None,
                              graph=options.cuda_graph if graphable else False)
        auto = self.steering.start_auto(ways, stager.cuda, options.warmup, options.trial, options.recheck)
        self.train.on_wait = auto.waited

    def found_calls(self) -> None:
        """The first step reaches ``backward`` (or its end): its frozen calls run ahead from now on."""
        if not self.calls.watching:
            return
        if self.calls.finish_watching() is not None:
            self.train.add_calls()  # the batches staged before the calls were known
        self.start_auto_if_ready()

    def state(self) -> PipelineState:
        """What this fit does now."""
        auto, calls, program = self.steering.auto, self.calls, self.calls.program
        waiting = self.options.mode == "auto" and auto is None and calls.probe is not None
        graphed = program is not None and program.graph is not None and program.graph.replays > 0
        return PipelineState(self.options.mode, self.steering.way,
                             deciding=waiting or (auto is not None and not auto.decided),
                             in_trials=auto is not None and auto.in_trials, graphed=graphed,
                             staged_calls=len(program.calls) if program is not None else 0)

    def facts(self) -> explain.Facts:
        """What this fit did, for :func:`~lightning_streamprof.pipeline.explain.report`."""
        options, calls = self.options, self.calls
        return explain.Facts(
            mode=options.mode, cuda=self.stager.cuda, way=None if options.mode == "auto" else self.steering.way,
            depth=options.depth, staged_batches=self.train.staged, serial_batches=self.train.serial,
            program=calls.program, misses=calls.misses, eval_batches=self.val.staged, eval_hits=calls.eval_hits,
            not_staged=calls.not_staged, auto=self.steering.auto, graph_way=calls.graph_way)

    def shutdown(self) -> None:
        """Training ends or fails: nothing is staged any more."""
        self.calls.stop_watching()
        self.train.reset()
        self.stager.shutdown()

    def end(self, trainer: Trainer) -> None:
        """Training ended: Lightning's fetcher and batch hooks and the frozen modules' methods are put back."""
        self.shutdown()
        fetcher = api.data_fetcher(trainer)
        if fetcher is not None:
            api.restore_fetcher(fetcher)
        self.hooks.restore()
        self.calls.remove()
        self.hooks.delivered = None


def _watched(pl_module: LightningModule, options: Options) -> list[tuple[str, nn.Module]]:
    specs = options.specs
    return frozen_modules(pl_module) if specs is None else [resolve(pl_module, spec) for spec in specs]


def _trains_on(trainer: Trainer, ahead: int) -> bool:
    """Whether the loop trains on the batch after the current one and the ``ahead`` staged beyond it."""
    later = 2 + ahead
    if api.batches_started(trainer) + later > trainer.num_training_batches:
        return False
    max_steps = trainer.max_steps
    return not (max_steps >= 0 and max_steps - trainer.global_step < later)
