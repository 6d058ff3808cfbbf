"""Bounded waits: a call that may hang (a remote store, a child process, a rank that never arrives) is given a
deadline; past it the caller goes on and the call is abandoned on a daemon thread (it cannot keep the process
alive). No torch: the helpers work with any callable and any key-value store with ``set``/``get``/``check``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

#: environment variable overriding :data:`DEFAULT_TIMEOUT` (seconds) for remote reads and writes
TIMEOUT_ENV = "STREAMPROF_IO_TIMEOUT"
#: seconds a remote store may take to answer one request
DEFAULT_TIMEOUT = 30.0


class DeadlineExceeded(TimeoutError):
    """A bounded call did not finish in time; ``what`` says what was waited for."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what} did not answer within {seconds:g} s")
        self.what = what
        self.seconds = seconds


def io_timeout() -> float:
    """Seconds a remote read or write may take: ``$STREAMPROF_IO_TIMEOUT``, else :data:`DEFAULT_TIMEOUT`."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if value > 0 else DEFAULT_TIMEOUT


def call_with_deadline(fn: Callable[[], T], seconds: float | None, what: str) -> T:
    """``fn()``, or :class:`DeadlineExceeded` when it takes more than ``seconds`` (``None``: wait for it).

    The call runs on a daemon thread; one that never returns is left there and never blocks the exit.
    Exceptions of ``fn`` are raised here, with their type.
    """
    if seconds is None:
        return fn()
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            box["error"] = err
        finally:
            done.set()

    threading.Thread(target=run, name=f"streamprof-deadline:{what}"[:60], daemon=True).start()
    if not done.wait(seconds):
        raise DeadlineExceeded(what, seconds)
    if "error" in box:
        raise box["error"]
    return box["value"]


class KeyValueStore(Protocol):
    """What :func:`store_gather` needs of a store (``torch.distributed.Store`` has it)."""

    def set(self, key: str, value: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def check(self, keys: list[str]) -> bool: ...


def store_gather(
    store: KeyValueStore, key: str, value: bytes, rank: int, ranks: Iterable[int], seconds: float,
    poll: float = 0.05,
) -> tuple[dict[int, bytes], list[int]]:
    """Publish ``value`` as ``key/<rank>`` and collect every rank's value until ``seconds`` have passed.

    Unlike a collective, a rank that never arrives (crashed, stuck, skipped the gather) cannot block the
    others: they get the values that did arrive and the list of missing ranks. ``key`` must be unique per
    gather (e.g. per window).
    """
    store.set(f"{key}/{rank}", value)
    waiting = {r: f"{key}/{r}" for r in ranks}
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + seconds
    while True:
        for r, k in list(waiting.items()):
            if store.check([k]):
                got[r] = store.get(k)
                del waiting[r]
        if not waiting or time.monotonic() >= deadline:
            return got, sorted(waiting)
        time.sleep(poll)
