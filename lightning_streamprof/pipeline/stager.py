"""Staging one batch: the precision plugin's input conversion, pinning, ``on_before_batch_transfer``, the
strategy's copy (which runs ``on_after_batch_transfer``) and the program's frozen calls, launched on a side CUDA
stream (from the loop's thread or the staging thread); an event marks the end of that work.
:meth:`StagedBatch.hand_over` makes the training stream wait for the event and take the memory over with
``record_stream``, so that the caching allocator does not reuse memory still in flight. Without CUDA the same steps
run in order, without streams."""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

import torch
from lightning.fabric.utilities.apply_func import apply_to_collection
from lightning.pytorch.utilities import rank_zero_warn

from lightning_streamprof.names import STAGE_ON_THREAD_RANGE
from lightning_streamprof.pipeline import pytree
from lightning_streamprof.pipeline.program import CallFailed, Program, StagedRun
from lightning_streamprof.pipeline.thread import StagingThread, on_staging_thread


def pin(batch: Any) -> Any:
    """Page-locked copies of a batch's CPU tensors (asynchronous host-to-device copies need them)."""
    return apply_to_collection(
        batch, torch.Tensor, lambda t: t.pin_memory() if t.device.type == "cpu" and not t.is_pinned() else t
    )


@dataclass
class StagedBatch:
    """A batch whose copy, augmentation and frozen calls were launched on the side stream; ``run`` holds the
    frozen calls' outputs (``None`` before the calls are known)."""

    batch: Any
    ready: torch.cuda.Event | None = None
    run: StagedRun | None = None
    index: tuple = (0, 0)  # (batch_idx, dataloader_idx) as the fetcher returned them

    def hand_over(self) -> Any:
        """Make the current stream wait for the staging work and own the staged memory from now on."""
        if self.ready is not None:
            stream = torch.cuda.current_stream()
            stream.wait_event(self.ready)
            staged = pytree.tensors(self.batch) + (self.run.tensors() if self.run is not None else [])
            for t in staged:
                if t.is_cuda:
                    t.record_stream(stream)
        return self.batch


class Stager:
    """Prepares one batch at a time: ``convert``, pinning, ``before(batch, dataloader_idx)``,
    ``transfer(batch, dataloader_idx)`` and the program's frozen calls, on ``stream`` (no stream on CPU); with
    ``thread``, also on the staging thread. A frozen call that fails stops running ahead (with the calls that read
    its output), with one warning.
    """

    def __init__(self, device: torch.device, pin_memory: bool, thread: bool, convert: Callable[[Any], Any],
                 before: Callable[[Any, int], Any], transfer: Callable[[Any, int], Any]) -> None:
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(device))
        self.executor = StagingThread(device) if thread else None
        self.pin_memory = pin_memory and self.cuda
        self.convert, self.before, self.transfer = convert, before, transfer
        self.program: Program | None = None
        self.use_graph = False  # whether the program replays its CUDA graph (auto switches it per trial)

    @property
    def overlaps(self) -> bool:
        """Whether staging runs beside the training step (on the side stream); without CUDA it runs in order and
        nothing overlaps, so ``auto`` has nothing to measure."""
        return self.stream is not None

    def inside_thread(self) -> bool:
        return self.executor is not None and on_staging_thread()

    def _side(self) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def stage(self, item: tuple) -> StagedBatch:
        """Batch ``item`` (as the fetcher returned it) staged now, on the calling thread."""
        batch = self.convert(item[0])
        if self.pin_memory:
            batch = pin(batch)
        with self._side():
            loader = item[2] if len(item) > 2 else 0  # the batch's dataloader index (several validation loaders)
            batch = self.transfer(self.before(batch, loader), loader)
            staged = StagedBatch(batch, index=tuple(item[1:]))
            self._run_program(staged)
            self._mark_ready(staged)
        return staged

    def stage_on_thread(self, item: tuple) -> Future:
        assert self.executor is not None

        def job() -> StagedBatch:
            with torch.autograd.profiler.record_function(STAGE_ON_THREAD_RANGE):
                return self.stage(item)

        return self.executor.submit(job)

    def add_calls(self, staged: StagedBatch) -> None:
        """Run the frozen calls ahead for a batch staged before they were known."""
        if staged.run is None:
            with self._side():
                self._run_program(staged)
                self._mark_ready(staged)

    def _run_program(self, staged: StagedBatch) -> None:
        program = self.program
        if program is None or not program.active:
            return
        try:
            staged.run = program.run(staged.batch, self.use_graph)
        except CallFailed as failed:  # the step computes it normally instead
            why = f"its staged call failed ({type(failed.error).__name__}: {failed.error})".splitlines()[0]
            stopped = program.stop(failed.call, why)
            others = "".join(f", `{c.label}`" for c in stopped if c is not failed.call)
            rank_zero_warn(f"StreamPipeline: `{failed.call.label}`{others}: {why}; it runs in the step.")

    def _mark_ready(self, staged: StagedBatch) -> None:
        if self.stream is not None:
            staged.ready = torch.cuda.Event()
            staged.ready.record(self.stream)

    def shutdown(self) -> None:
        """Stop the staging thread (after the jobs it has)."""
        if self.executor is not None:
            self.executor.shutdown()
            self.executor = None

    def wait_idle(self) -> None:
        """No staging work in flight on the side stream (before freeing memory it may use)."""
        if self.stream is not None:
            self.stream.synchronize()
