"""Posting and collecting through the process group's key-value store (``TCPStore``), every wait bounded.

Posting never blocks (``store.set``); only a collecting rank waits, and ``store.wait(keys, timeout)`` bounds
that wait: a rank that does not answer is left out, and training goes on. Keys read are deleted. No collective
runs, so nothing enters the NCCL/gloo streams or the traces, and a rank that never reaches the gather cannot
hang the others. :mod:`.gather` builds the two-level gather on this.
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
    """Post and collect small payloads under ``prefix`` (one namespace per run): ``<prefix>/<tag>/<name>``, where
    a rank's name is its number."""

    def __init__(self, store: Any, rank: int, world_size: int, prefix: str, timeout: float) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.prefix, self.timeout = prefix, timeout

    def _key(self, tag: str, name: int | str) -> str:
        return f"{self.prefix}/{tag}/{name}"

    def post(self, tag: str, payload: bytes, rank: int | str | None = None) -> None:
        """Publish this rank's payload for ``tag`` (or under another name, e.g. ``"decision"``; never waits)."""
        self.store.set(self._key(tag, self.rank if rank is None else rank), payload)

    def collect(self, tag: str, ranks: Sequence[int] | None = None, timeout: float | None = None) -> dict[int, bytes]:
        """The payloads of ``ranks`` (default: all) for ``tag``, waiting at most ``timeout`` seconds; ranks that
        have not posted by then are left out. The keys read are deleted."""
        ranks = list(range(self.world_size)) if ranks is None else list(ranks)
        got = self.collect_named(tag, [str(r) for r in ranks], timeout)
        return {int(name): value for name, value in got.items()}

    def collect_named(self, tag: str, names: Sequence[str], timeout: float | None = None) -> dict[str, bytes]:
        """:meth:`collect` by key name; ``timeout`` 0 reads only what is there already."""
        names = list(names)
        if not names:
            return {}
        keys = [self._key(tag, n) for n in names]
        seconds = self.timeout if timeout is None else timeout
        present = names
        try:
            if seconds <= 0:
                raise TimeoutError  # never ask the store to wait 0 s: some versions read it as "no limit"
            self.store.wait(keys, datetime.timedelta(seconds=seconds))
        except Exception:  # noqa: BLE001 - a timeout (its type differs across torch versions): read what is there
            present = [n for n, k in zip(names, keys) if self.store.check([k])]
        return dict(zip(present, self._read([self._key(tag, n) for n in present])))

    def peek(self, keys: Sequence[tuple[str, str]]) -> list[bytes | None]:
        """For each (tag, name): its payload if posted by now (read and deleted), else None; never waits."""
        out: list[bytes | None] = []
        for tag, name in keys:
            key = self._key(tag, name)
            out.append(self._read([key])[0] if self.store.check([key]) else None)
        return out

    def _read(self, keys: list[str]) -> list[bytes]:
        """The values of keys known to exist (one request where the store has ``multi_get``), then deleted."""
        if not keys:
            return []
        multi = getattr(self.store, "multi_get", None)
        values = multi(keys) if multi is not None and len(keys) > 1 else [self.store.get(k) for k in keys]
        for key in keys:
            try:
                self.store.delete_key(key)
            except Exception:  # noqa: BLE001 - a store without deletion keeps the few bytes
                pass
        return values

    def remove(self, tag: str, name: str) -> None:
        """Delete the payload under ``tag``/``name``, if the store can (a store without deletion keeps it)."""
        try:
            self.store.delete_key(self._key(tag, name))
        except Exception:  # noqa: BLE001
            pass

    def wait_one(self, tag: str, name: str, timeout: float | None = None) -> bytes | None:
        """The payload posted under ``tag``/``name`` (e.g. rank 0's decision), or None after ``timeout``."""
        key = self._key(tag, name)
        try:
            self.store.wait([key], datetime.timedelta(seconds=self.timeout if timeout is None else timeout))
        except Exception:  # noqa: BLE001
            return None
        return self.store.get(key)
