"""``StreamProfiler(memory_snapshot=True)``: the CUDA caching allocator's history with Python stacks for each window's
steps, dumped beside its trace as ``rank<R>.memory_snapshot.pickle`` (PyTorch's memory viewer, pytorch.org/memory_viz,
and ``torch.cuda._memory_viz`` read it; :mod:`lightning_streamprof.analysis.memory_snapshot` reads it for the report).

The history starts at a window's first warm-up step (the peak statistics reset there) and stops when the window ends:
the dump is made on the training thread (it is the allocator's state then), the file is written by a daemon thread.
Without CUDA it records nothing, and says so in one line.

``StreamProfiler(oom_stacks=True)`` keeps the allocator's light record on over the whole fit: the Python stack of each
live allocation and no history (:data:`LIGHT`), so that an out-of-memory error can name the lines that hold the memory
(:mod:`.out_of_memory`). It is off by default: on an H200 it costs 10-17% of every step, the window's full history
9-24% of the window's steps (``benchmarks/results/memory-history-cost/``).
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
#: the record ``oom_stacks=True`` keeps between windows: the stacks of live allocations, no history of alloc and free
#: (the window's entries cleared, so that the allocator keeps no history it will not dump)
LIGHT = {"enabled": "state", "context": "state", "stacks": "python", "clear_history": True}
#: a window's record: every alloc and free with its Python stack, from an empty history (the allocator keeps the
#: entries of earlier windows otherwise, and the window's snapshot would hold them)
WINDOW = {"enabled": "all", "context": "all", "stacks": "python", "max_entries": MAX_ENTRIES, "clear_history": True}


def snapshot_name(rank: int) -> str:
    """The snapshot's file name in its window's directory."""
    return f"rank{rank}.{SUFFIX}"


class MemorySnapshots:
    """Records the allocator's history for each window (:meth:`start`, :meth:`stop`; ``windows``) and its light
    record between them (:meth:`begin`, :meth:`end`; ``light``); ``peaks`` holds ``torch.cuda.max_memory_allocated()``
    over each window's steps (the allocator's blocks), ``requested_peaks`` the peak of the bytes asked for (what the
    snapshot's sizes are), ``written`` the snapshots' paths."""

    def __init__(self, windows: bool = True, light: bool = False) -> None:
        self.windows, self.light = windows, light
        self.peaks: dict[int, int] = {}
        self.requested_peaks: dict[int, int] = {}
        self.device: int | None = None  # the CUDA device the peaks are of
        self.written: dict[int, str] = {}
        self.problems: list[str] = []
        self._on = False
        self._light_on = False
        self._threads: list[threading.Thread] = []

    @property
    def recording(self) -> bool:
        """The allocator records stacks now (a window is open, or the light record is on)."""
        return self._on or self._light_on

    def begin(self) -> None:
        """The fit starts: the light record comes on (where wanted)."""
        if self.light and not self._light_on:
            self._light_on = self._record(LIGHT, "the allocator's light record could not start")

    def end(self) -> None:
        """The fit ends: the light record goes off."""
        if self._light_on and not self._on:
            with contextlib.suppress(Exception):
                torch.cuda.memory._record_memory_history(enabled=None)
        self._light_on = False

    def start(self) -> None:
        """The window's first step comes next: the history starts (a failure is noted, the window goes on)."""
        if not self.windows:
            return
        try:
            torch.cuda.reset_peak_memory_stats()
        except Exception as err:  # noqa: BLE001
            self._note(f"the allocator's peak could not be reset: {err}")
        self._on = self._record(WINDOW, "the allocator's history could not start")

    def _record(self, how: dict, failure: str) -> bool:
        record = torch.cuda.memory._record_memory_history
        try:
            try:
                record(**how)
            except TypeError:  # a torch before `clear_history`
                record(**{k: v for k, v in how.items() if k != "clear_history"})
            return True
        except Exception as err:  # noqa: BLE001 - a private API: its failure is a note, never the run's
            self._note(f"{failure}: {err}")
            return False

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
                self.device = torch.cuda.current_device()
                self.peaks[window] = int(torch.cuda.max_memory_allocated())
                requested = torch.cuda.memory_stats().get("requested_bytes.all.peak")
                if requested is not None:
                    self.requested_peaks[window] = int(requested)
        except Exception as err:  # noqa: BLE001
            self._note(f"the memory snapshot of window {window} could not be dumped: {err}")
            if local is not None:
                remove_local(local)
            local = None
        finally:
            if self._light_on:
                self._light_on = self._record(LIGHT, "the allocator's light record could not come back")
            else:
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


def attach_snapshots(wanted: bool, light: bool = False) -> tuple[MemorySnapshots | None, str | None]:
    """The snapshots of a stage's windows (``wanted``) and its light record (``light``), or None and the line that
    says why there are none (None when neither is wanted)."""
    if not (wanted or light):
        return None, None
    if not torch.cuda.is_available():
        return None, ("memory_snapshot=True: no CUDA device here, so no memory snapshot is recorded" if wanted else
                      "oom_stacks=True: no CUDA device here, so no allocation's stack is kept")
    if not hasattr(torch.cuda.memory, "_record_memory_history"):
        which = "memory_snapshot=True" if wanted else "oom_stacks=True"
        return None, f"{which}: this torch has no allocator history, so no memory snapshot is recorded"
    snapshots = MemorySnapshots(windows=wanted, light=light)
    snapshots.begin()
    return snapshots, None
