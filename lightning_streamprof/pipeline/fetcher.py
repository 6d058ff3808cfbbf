"""The batches of one loop (the training loop, or validation inside ``fit``), each staged while the one before it
runs.

Lightning fetches batch N (``next(fetcher)``), then runs ``on_before_batch_transfer``, the transfer and
``on_after_batch_transfer`` on it, then the step. Once :func:`~lightning_streamprof.pipeline.lightning_api.
install_staging_fetcher` has swapped the class of Lightning's fetcher, its ``__next__`` is
:meth:`StagingFetcher.next`: batch N comes out of a slot, prepared while batch N-1 ran, and batches N+1 ..
N+``depth`` are read from the loader and staged before it returns (for the staging thread only read: the thread
stages them once the step reaches ``backward``). Slots are delivered in order, so hooks run in batch order; the
loader's end is seen one read early, so the fetcher's ``done`` is recomputed from the slots. A way that does not
stage hands over the loader's batch as Lightning would have.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable

from lightning_streamprof.pipeline import lightning_api as api
from lightning_streamprof.pipeline.program import StagedRun
from lightning_streamprof.pipeline.stager import StagedBatch, Stager
from lightning_streamprof.pipeline.thread import Fetched
from lightning_streamprof.pipeline.way import Way

#: a staged batch, one being staged on the staging thread, or one read and waiting for the thread
Slot = StagedBatch | Future | Fetched


def _anywhere(ahead: int) -> bool:
    return True


class StagingFetcher:
    """Hands one loop its batches staged. ``way()`` says how each batch runs (called once per batch, before it is
    fetched); ``deliver(batch, run)`` is told of each batch handed over (``None, None`` for one handed over as the
    loader gave it); ``may_read_ahead(ahead)`` whether the loop will use a batch beyond the ``ahead`` already
    staged (none is prepared and dropped); ``scope()`` is entered around each read ahead of the loop."""

    def __init__(self, stager: Stager, depth: int, way: Callable[[], Way],
                 deliver: Callable[[Any, StagedRun | None], None],
                 may_read_ahead: Callable[[int], bool] = _anywhere,
                 scope: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> None:
        self.stager, self.depth, self.way, self.deliver = stager, depth, way, deliver
        self.may_read_ahead, self.scope = may_read_ahead, scope
        self.on_wait: Callable[[float], None] | None = None  # told the seconds each read waited for the loader
        self.slots: deque[Slot] = deque()
        self.exhausted = False  # the loader has no batch after the last one read
        self.staged = 0  # batches handed over staged
        self.serial = 0  # batches handed over as the loader gave them

    def reset(self) -> None:
        """Nothing staged so far is delivered (a new iterator of the loader, or the end of the fit)."""
        slots, self.slots = self.slots, deque()
        for slot in slots:
            if isinstance(slot, Future):
                with contextlib.suppress(Exception):  # a batch that will not be run
                    slot.result()
        self.exhausted = False

    def next(self, fetcher: Any, base_next: Callable[[Any], Any]) -> Any:
        """Batch N for the loop (as ``base_next(fetcher)`` returns it); batches up to N + ``depth`` staged first."""
        way = self.way()
        staged = self.slots.popleft() if self.slots else None
        if staged is None:
            item = self._read(fetcher, base_next)  # Lightning's fetch action
            self.exhausted = api.fetcher_done(fetcher)
            if not way.staged:
                self.deliver(None, None)
                self.serial += 1
                return item
            staged = self.stager.stage(item)  # batch N's hooks run before batch N+1's
            batch = staged.hand_over()
        else:
            with api.fetch_profiled(fetcher):  # the loop's fetch of batch N: waiting for its staging
                staged = self._resolve(staged)
                batch = staged.hand_over()
        self.deliver(batch, staged.run)
        self.staged += 1
        while (way.staged and not self.exhausted and len(self.slots) < self.depth
               and self.may_read_ahead(len(self.slots))):
            self._read_ahead(fetcher, base_next, way)
        api.set_fetcher_done(fetcher, self.exhausted and not self.slots)  # no batch after N
        return (batch, *staged.index)

    def start_fetched(self) -> None:
        """Stage the slots only read on the staging thread (the training thread now waits in ``backward``)."""
        for i, slot in enumerate(self.slots):
            if isinstance(slot, Fetched):
                self.slots[i] = self.stager.stage_on_thread(slot.item)

    def resolve_all(self) -> None:
        """Every slot staged, and its staging finished."""
        for i, slot in enumerate(self.slots):
            self.slots[i] = self._resolve(slot)

    def add_calls(self) -> None:
        """Run the frozen calls ahead for the batches staged before the calls were known."""
        for slot in self.slots:
            if isinstance(slot, StagedBatch):
                self.stager.add_calls(slot)

    def _resolve(self, slot: Slot) -> StagedBatch:
        if isinstance(slot, Fetched):
            return self.stager.stage(slot.item)  # no backward in this step (e.g. a skipped step)
        if isinstance(slot, Future):
            return slot.result()
        return slot

    def _read(self, fetcher: Any, base_next: Callable[[Any], Any]) -> Any:
        """``(batch, batch_idx, dataloader_idx)`` from the loader, timed for ``on_wait``."""
        if self.on_wait is None:
            return base_next(fetcher)
        t0 = time.perf_counter()
        try:
            return base_next(fetcher)
        finally:
            self.on_wait(time.perf_counter() - t0)

    def _read_ahead(self, fetcher: Any, base_next: Callable[[Any], Any], way: Way) -> None:
        try:
            with api.fetch_unprofiled(fetcher), self.scope():
                item = self._read(fetcher, base_next)
                self.exhausted = api.fetcher_done(fetcher)
                if way.thread and self.stager.executor is not None:
                    self.slots.append(Fetched(item))  # staged on the thread once the step reaches backward
                else:
                    self.slots.append(self.stager.stage(item))
        except StopIteration:
            self.exhausted = True
