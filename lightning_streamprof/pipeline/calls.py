"""The frozen calls that run ahead, through a fit.

They are found on the first training step (:mod:`~lightning_streamprof.pipeline.probe`: every call of a frozen
module, through ``forward`` or another method of its own, whose arguments are made from the batch or from an
earlier frozen call's output by deterministic operations), or given by ``backbone_input``. They become the
:class:`~lightning_streamprof.pipeline.program.Program` the stager runs on each staged batch (eagerly or as one
CUDA graph) and the :class:`~lightning_streamprof.pipeline.proxy.CallProxies` that serve the staged outputs to an
unchanged ``training_step``. A call that cannot be staged is named in one warning with the reason and the fix; a
call that serves nothing in :data:`SILENT_AFTER` pipelined steps is named too.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import nn

from lightning_streamprof.pipeline import pytree
from lightning_streamprof.pipeline.derivation import UserInput
from lightning_streamprof.pipeline.frozen import resolve
from lightning_streamprof.pipeline.graph import GraphedForward
from lightning_streamprof.pipeline.options import BackboneSpec
from lightning_streamprof.pipeline.probe import CallProbe, Findings
from lightning_streamprof.pipeline.program import Arg, Program, StagedCall, StagedRun
from lightning_streamprof.pipeline.proxy import CallProxies
from lightning_streamprof.pipeline.stager import Stager
from lightning_streamprof.pipeline.way import Way

#: pipelined steps after which a staged call that never served its output is reported
SILENT_AFTER = 20


def given_program(name: str, module: nn.Module, backbone_input: Callable[[Any], torch.Tensor],
                  amp: tuple | None) -> Program:
    """The one backbone's ``forward``, staged with ``backbone_input(batch)`` as its input."""
    spec = pytree.flatten(((torch.empty(0),), {}))[0]
    call = StagedCall(0, name, "forward", module, module.forward, spec, (Arg("equal", UserInput(backbone_input)),), amp)
    return Program([call], amp=amp)


class FrozenCalls:
    """The staged calls of one fit: ``probe`` while the first step is watched, then ``program`` and ``proxies``
    (``None`` while, or if, there is nothing to stage). ``specs`` are the named backbones (``None``: found);
    ``capture_ahead`` captures the calls' CUDA graph from the first step's batch as soon as they are found;
    ``announce_graph`` says in one line whether the calls replay a graph (``mode="on"``)."""

    def __init__(self, stager: Stager, pl_module: LightningModule, specs: list[BackboneSpec] | None,
                 cuda_graph: bool | None, capture_ahead: bool, announce_graph: bool) -> None:
        self.stager, self._module, self._specs = stager, pl_module, specs
        self._cuda_graph, self._capture_ahead, self._announce_graph = cuda_graph, capture_ahead, announce_graph
        self.probe: CallProbe | None = None
        self.program: Program | None = None
        self.proxies: CallProxies | None = None
        self.not_staged: list[str] = []  # frozen calls not staged, each with its reason
        self.graph_way: str | None = None  # whether the calls replay a CUDA graph, and why not
        self._probe_batch: Any = None
        self._warned_silent: set[int] = set()

    # ------------------------------------------------------------------ finding them

    def find_in_first_step(self, watched: list[tuple[str, nn.Module]], refuse_sharded: bool) -> None:
        self.probe = CallProbe(watched, refuse_sharded=refuse_sharded)

    @property
    def watching(self) -> bool:
        return self.probe is not None and self.probe.watching

    def start_step(self, batch: Any) -> None:
        """A training step starts (``batch``, transferred): the first one is watched."""
        if self.probe is not None and not self.probe.watching:
            self.probe.start(batch)
            self._probe_batch = batch

    def finish_watching(self) -> Program | None:
        """The first step has made its frozen calls: install what can be staged and explain the rest."""
        probe, self.probe = self.probe, None
        findings = probe.stop() if probe is not None else Findings(None)
        batch, self._probe_batch = self._probe_batch, None
        self._explain(findings)
        program = findings.program
        if program is not None:
            self.install(program)
            if program.graph is not None and self._capture_ahead:
                self._capture_graph_ahead(program, batch)
        return program

    def install(self, program: Program) -> None:
        for module, name in {id(c.module): (c.module, c.name) for c in program.calls}.values():
            if module.training:
                rank_zero_warn(
                    f"StreamPipeline: frozen module {name!r} is in training mode; its staged calls run in that mode"
                    " (BatchNorm statistics). Call `.eval()` on it for identical results."
                )
        if self.stager.cuda and self._cuda_graph is not False:
            program.graph = GraphedForward(program.graph_forward, defer=self.stager.inside_thread,
                                           on_failure=program.graph_failed)
        self.program = program
        self.proxies = CallProxies(program)
        self.stager.program = program

    def _capture_graph_ahead(self, program: Program, batch: Any) -> None:
        """Capture the calls' graph as soon as the first step has found them, from that step's batch, on the
        training thread: the graph's first use (the first batch staged on the staging thread, or auto's trial)
        replays, never runs eagerly on the staging thread (where cuDNN would tune every convolution again)."""
        graphed, stream = program.graph, self.stager.stream
        if graphed is None or stream is None or not program.roots:
            return
        try:
            roots = program.root_values(batch)
        except Exception:  # noqa: BLE001 - the graph is captured when first used instead
            return
        stream.wait_stream(torch.cuda.current_stream())
        for t in roots:
            t.record_stream(stream)
        with torch.cuda.stream(stream):
            graphed.prepare(*roots)
        if self._announce_graph:
            self.graph_way = ("the staged calls replay a CUDA graph (checked equal to eager)" if graphed.captured
                              else f"the staged calls run eagerly: {graphed.failure or 'no graph was captured'}")
            rank_zero_info(f"StreamPipeline (on): {self.graph_way}.")

    def _explain(self, found: Findings) -> None:
        """One warning per frozen call that cannot be staged; one info line when there is nothing to stage."""
        named = self._specs is not None
        for label, (why, fix) in found.refused.items():
            self.not_staged.append(f"`{label}` {why}")
            rank_zero_warn(f"StreamPipeline: `{label}` {why}; it runs in the step. {fix}".rstrip())
        for label, why in found.unrelated.items():
            self.not_staged.append(f"`{label}` {why}")
            if named:
                rank_zero_warn(f"StreamPipeline: `{label}` {why}: nothing of it can be staged.")
        if named:
            for spec in self._specs or ():
                name = resolve(self._module, spec)[0]
                if name not in found.called:
                    self.not_staged.append(f"backbone {name!r} is not called in the first training step")
                    rank_zero_warn(f"StreamPipeline: backbone {name!r} is not called in the first training step;"
                                   " nothing of it is staged.")
        elif found.program is None and not found.refused:
            if found.unrelated:
                text = "; ".join(f"`{label}` {why}" for label, why in found.unrelated.items())
                rank_zero_info(f"StreamPipeline: no frozen call is staged: {text}.")
            else:
                self.not_staged.append("the training step calls no frozen module")
                rank_zero_info("StreamPipeline: the training step calls no frozen module; only the batch is staged.")

    # ------------------------------------------------------------------ serving them

    def serve(self, batch: Any, run: StagedRun | None) -> None:
        """Offer ``batch``'s staged outputs to the step now starting (``None, None``: none)."""
        if self.proxies is not None:
            self.proxies.serve(batch, run)

    def start_validation(self) -> None:
        if self.proxies is not None:
            self.proxies.evaluating = True

    def end_validation(self) -> bool:
        """Whether validation batches were being served (their hits are counted apart)."""
        if self.proxies is None or not self.proxies.evaluating:
            return False
        self.proxies.evaluating = False
        return True

    @property
    def serving(self) -> bool:
        """Whether staged outputs are served (the calls are known and some can be staged)."""
        return self.proxies is not None

    @property
    def misses(self) -> dict[str, int] | None:
        """Per staged ``module.method``, its calls computed in the step."""
        return dict(self.proxies.misses) if self.proxies is not None else None

    @property
    def eval_hits(self) -> int:
        return sum(self.proxies.eval_hits.values()) if self.proxies is not None else 0

    def after_step(self, staged_batches: int, running_ahead: bool) -> None:
        """A training step ended: nothing left to serve; the graph made current; silent calls named (while
        ``running_ahead``, after ``staged_batches`` pipelined steps)."""
        program = self.program
        if program is None or self.proxies is None:
            return
        self.proxies.serve(None, None)  # an output not used in its own step is never served later
        graphed = program.graph
        if graphed is not None and program.stale:
            self.stager.wait_idle()  # no replay in flight while its memory pool is freed
            graphed.release()  # captured again without the calls that stopped
            program.stale = False
        if graphed is not None and graphed.pending and self.stager.stream is not None:
            with torch.cuda.stream(self.stager.stream):  # no other thread stages now (see GraphedForward)
                graphed.capture_pending()
        if staged_batches >= SILENT_AFTER and running_ahead:
            self._warn_silent(program, staged_batches)

    def _warn_silent(self, program: Program, staged_batches: int) -> None:
        for call in program.calls:
            if call.hits or not call.active or call.index in self._warned_silent:
                continue
            self._warned_silent.add(call.index)
            rank_zero_warn(f"StreamPipeline: `{call.label}` served no staged output in {staged_batches}"
                           " pipelined steps: `training_step` never called it with the staged arguments.")

    def release_unused_graph(self, way: Way) -> None:
        """A way without the calls' CUDA graph was chosen: free its memory until it is used again."""
        graphed = self.program.graph if self.program is not None else None
        if graphed is not None and not way.graph:
            self.stager.wait_idle()  # no replay in flight while its memory pool is freed
            graphed.release()

    def stop_watching(self) -> None:
        if self.probe is not None and self.probe.watching:
            self.probe.stop()

    def remove(self) -> None:
        """Put the frozen modules' methods back."""
        if self.proxies is not None:
            self.proxies.remove()
