"""``StreamProfiler(memory_snapshot=True)``: the CUDA caching allocator's history with Python stacks for each window's
steps, dumped beside its trace as ``rank<R>.memory_snapshot.pickle`` (PyTorch's memory viewer, pytorch.org/memory_viz,
and ``torch.cuda._memory_viz`` read it; :mod:`lightning_streamprof.analysis.memory_snapshot` reads it for the report).

The history starts at a window's first warm-up step (the peak statistics reset there) and stops when the window ends:
the dump is made on the training thread (it is the allocator's state then), the file is written by a daemon thread.
Without CUDA it records nothing, and says so in one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading

import torch

from lightning_streamprof.analysis.memory_snapshot import SNAPSHOT_SUFFIX as SUFFIX
from lightning_streamprof.profiling.storage import remove_local, write_atomic

log = logging.getLogger(__name__)

#: history entries kept per window (the oldest go first); a ResNet-50 step makes a few thousand
MAX_ENTRIES = 1_000_000


def snapshot_name(rank: int) -> str:
    """The snapshot's file name in its window's directory."""
    return f"rank{rank}.{SUFFIX}"


class MemorySnapshots:
    """Records the allocator's history for each window (:meth:`start`, :meth:`stop`); ``peaks`` holds
    ``torch.cuda.max_memory_allocated()`` over each window's steps, ``written`` the snapshots' paths."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self.written: dict[int, str] = {}
        self.problems: list[str] = []
        self._on = False
        self._threads: list[threading.Thread] = []

    @property
    def recording(self) -> bool:
        """The allocator's history is being recorded (a window is open)."""
        return self._on

    def start(self) -> None:
        """The window's first step comes next: the history starts (a failure is noted, the window goes on)."""
        try:
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                                     max_entries=MAX_ENTRIES)
            self._on = True
        except Exception as err:  # noqa: BLE001 - a private API: its failure is a note, never the run's
            self._note(f"the allocator's history could not start: {err}")

    def stop(self, window: int, target: str | None) -> None:
        """The window ended: dump the history to ``target`` (None: the window was not recorded) and stop it."""
        if not self._on:
            return
        self._on = False
        local = None
        try:
            if target is not None:
                fd, local = tempfile.mkstemp(prefix="streamprof-", suffix=f".{SUFFIX}")
                os.close(fd)
                torch.cuda.memory._dump_snapshot(local)
                self.peaks[window] = int(torch.cuda.max_memory_allocated())
        except Exception as err:  # noqa: BLE001
            self._note(f"the memory snapshot of window {window} could not be dumped: {err}")
            if local is not None:
                remove_local(local)
            local = None
        finally:
            with contextlib.suppress(Exception):
                torch.cuda.memory._record_memory_history(enabled=None)
        if local is not None and target is not None:
            thread = threading.Thread(target=self._write, args=(window, local, target), daemon=True,
                                      name="streamprof-snapshot")
            thread.start()
            self._threads.append(thread)

    def _write(self, window: int, local: str, target: str) -> None:
        try:
            with open(local, "rb") as f:
                write_atomic(target, f.read())
            self.written[window] = target
        except Exception as err:  # noqa: BLE001
            self._note(f"could not write {target}: {err}")
        finally:
            remove_local(local)

    def wait(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds in all) for the snapshots being written."""
        for thread in self._threads:
            thread.join(timeout)
        self._threads = [t for t in self._threads if t.is_alive()]

    def _note(self, line: str) -> None:
        log.debug("streamprof: %s", line)
        if line not in self.problems:
            self.problems.append(line)


def attach_snapshots(wanted: bool) -> tuple[MemorySnapshots | None, str | None]:
    """The snapshots of a stage's windows, or None and the line that says why there are none (None when not wanted)."""
    if not wanted:
        return None, None
    if not torch.cuda.is_available():
        return None, "memory_snapshot=True: no CUDA device here, so no memory snapshot is recorded"
    if not hasattr(torch.cuda.memory, "_record_memory_history"):
        return None, "memory_snapshot=True: this torch has no allocator history, so no memory snapshot is recorded"
    return MemorySnapshots(), None
