"""A bounded gather through the process group's key-value store (``TCPStore``): ranks post, rank 0 waits.

Posting never blocks (``store.set``); only the collecting rank waits, and ``store.wait(keys, timeout)``
bounds that wait: a rank that does not answer is reported missing, and training goes on. No collective
runs, so nothing enters the NCCL/gloo streams or the traces, and a rank that never reaches the gather cannot
hang the others.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)


def default_store() -> Any | None:
    """The default process group's store, or None (no process group, or a torch without the accessor)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - a private accessor: without it there is no live aggregation
        log.debug("streamprof: no default store", exc_info=True)
        return None


class StoreExchange:
    """Post and collect small payloads under ``prefix`` (one namespace per run)."""

    def __init__(self, store: Any, rank: int, world_size: int, prefix: str, timeout: float) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.prefix, self.timeout = prefix, timeout

    def _key(self, tag: str, rank: int | str) -> str:
        return f"{self.prefix}/{tag}/{rank}"

    def post(self, tag: str, payload: bytes, rank: int | str | None = None) -> None:
        """Publish this rank's payload for ``tag`` (never waits)."""
        self.store.set(self._key(tag, self.rank if rank is None else rank), payload)

    def collect(self, tag: str, ranks: Sequence[int] | None = None, timeout: float | None = None) -> dict[int, bytes]:
        """The payloads of ``ranks`` (default: all) for ``tag``, waiting at most ``timeout`` seconds; ranks that
        have not posted by then are left out. The keys read are deleted."""
        ranks = list(range(self.world_size)) if ranks is None else list(ranks)
        keys = [self._key(tag, r) for r in ranks]
        wait = datetime.timedelta(seconds=self.timeout if timeout is None else timeout)
        present = ranks
        try:
            self.store.wait(keys, wait)
        except Exception:  # noqa: BLE001 - a timeout (its type differs across torch versions): read what is there
            present = [r for r, k in zip(ranks, keys) if self.store.check([k])]
        out = {}
        for r in present:
            key = self._key(tag, r)
            out[r] = self.store.get(key)
            try:
                self.store.delete_key(key)
            except Exception:  # noqa: BLE001 - a store without deletion keeps the few bytes
                pass
        return out

    def wait_one(self, tag: str, name: str, timeout: float | None = None) -> bytes | None:
        """The payload posted under ``tag``/``name`` (e.g. rank 0's decision), or None after ``timeout``."""
        key = self._key(tag, name)
        try:
            self.store.wait([key], datetime.timedelta(seconds=self.timeout if timeout is None else timeout))
        except Exception:  # noqa: BLE001
            return None
        return self.store.get(key)
