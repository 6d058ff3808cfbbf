"""The staging thread: one worker that prepares batches in order, off the training loop's thread."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import torch

_local = threading.local()


def on_staging_thread() -> bool:
    """Whether the caller runs on a staging thread."""
    return getattr(_local, "inside", False)


class Fetched:
    """Batch N+1 as the loader gave it, waiting for the training thread to block in ``backward`` before the
    staging thread prepares it (so that the two threads do not contend for the GIL during the step)."""

    __slots__ = ("item",)

    def __init__(self, item: tuple) -> None:
        self.item = item


class StagingThread:
    """A single worker thread (jobs run in submission order) bound to ``device``."""

    def __init__(self, device: torch.device) -> None:
        self._pool = ThreadPoolExecutor(1, "streampipe", initializer=_init, initargs=(device,))

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        return self._pool.submit(fn, *args)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


def _init(device: torch.device) -> None:
    _local.inside = True
    if device.type == "cuda":
        torch.cuda.set_device(device)  # the current device is per thread
