"""When ``torch.cuda.OutOfMemoryError`` ends a training step: what held the memory, written before the exception goes
on unchanged.

Beside the run's windows, global rank R writes ``rank<R>.out_of_memory.txt``: one line ("out of memory at step S: X GiB
allocated, Y GiB reserved of Z GiB; Python holds parameters ..., gradients ..., optimizer state ..., other tensors ...
(:mod:`.held_tensors`); largest live allocations: ..."), then ``torch.cuda.memory_summary()``; and, where the allocator
kept stacks (``oom_stacks=True``, or ``memory_snapshot=True`` during a window), the snapshot as
``rank<R>.out_of_memory.memory_snapshot.pickle``, whose live blocks name the lines that hold the memory. Everything
here is bounded and guarded: a failure is one debug line,
never a second error on the way out.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from typing import Any

import torch

from lightning_streamprof.profiling.held_tensors import HeldTensors, held_tensors
from lightning_streamprof.profiling.storage import join_path, write_atomic
from lightning_streamprof.words import byte_size

log = logging.getLogger(__name__)

#: allocations named in the report's first line
NAMED = 3
GiB = 2**30


def is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError)


def _largest(snapshot: dict[str, Any] | None) -> str:
    """The largest allocations live at the error, by line (empty without stacks)."""
    if not snapshot:
        return ""
    from lightning_streamprof.analysis.memory_snapshot import NO_FRAMES, live_at_dump

    rows = [r for r in live_at_dump(snapshot) if r.location != NO_FRAMES][:NAMED]
    return "; largest live allocations: " + ", ".join(f"{byte_size(r.bytes)} in {r.count:,} at {r.location}"
                                                      for r in rows) if rows else ""


def oom_line(step: int, snapshot: dict[str, Any] | None = None, held: HeldTensors | None = None) -> str:
    """The report's first line, from the allocator's counters now, what Python holds (``held``) and the allocator's
    stacks (``snapshot``), when recorded."""
    if not torch.cuda.is_available():
        return f"out of memory at step {step:,}: CUDA is not available here, so the allocator has nothing to say"
    device = torch.cuda.current_device()
    allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    total = torch.cuda.get_device_properties(device).total_memory
    holds = f"; Python holds {held.describe(allocated)}" if held is not None else ""
    largest = _largest(snapshot) or ("; StreamProfiler(oom_stacks=True) names the lines that hold the memory"
                                     if snapshot is None else "")
    return (f"out of memory at step {step:,}: {allocated / GiB:.2f} GiB allocated, {reserved / GiB:.2f} GiB reserved "
            f"of {total / GiB:.2f} GiB{holds}{largest}")


def write_oom_report(run_dir: str, rank: int, step: int, recording: bool,
                     holders: Callable[[], tuple[Any, list[Any]]] | None = None) -> str | None:
    """Write what can be said of the memory at an out-of-memory error (``recording``: the allocator keeps stacks;
    ``holders``: the module and the optimizers, whose tensors are named); the report's first line, or None when
    nothing could be written."""
    try:
        cuda = torch.cuda.is_available()
        snapshot = torch.cuda.memory._snapshot() if recording and cuda else None
        line = oom_line(step, snapshot, _held(holders) if cuda else None)
        summary = torch.cuda.memory_summary() if cuda else ""
        write_atomic(join_path(run_dir, f"rank{rank}.out_of_memory.txt"), f"{line}\n\n{summary}".encode())
        if snapshot is not None:
            write_atomic(join_path(run_dir, f"rank{rank}.out_of_memory.memory_snapshot.pickle"), pickle.dumps(snapshot))
        return line
    except Exception as err:  # noqa: BLE001 - never a second error on the way out
        log.debug("streamprof: could not write the out-of-memory report: %s", err)
        return None


def _held(holders: Callable[[], tuple[Any, list[Any]]] | None) -> HeldTensors | None:
    try:
        module, optimizers = holders() if holders is not None else (None, [])
        return held_tensors(module, optimizers)
    except Exception as err:  # noqa: BLE001
        log.debug("streamprof: could not name the tensors held at the out-of-memory error: %s", err)
        return None
