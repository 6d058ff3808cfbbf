"""A two-level bounded gather through the store: every rank to its host's leader, every leader to rank 0.

Each rank posts its payload (``store.set``: never waits). The leader of each host (its local rank 0) waits at most
``host_timeout`` seconds for its host's ranks, combines what arrived into one block and posts it with the list of
its ranks that did not answer; rank 0 (the leader of host 0) waits for the other hosts' blocks until ``timeout``
seconds after it began. So rank 0 reads one key per host (2,048 for 16,384 ranks on 8-GPU hosts), not one per
rank, and no level waits past its bound.

A rank (or host) that did not answer is named in :attr:`Gathered.missing` and is not waited for at the next
gathers until it posts again; what it posts late is read at the next gather (``carry_late``) and goes with
that one. No collective runs: nothing enters the NCCL/gloo streams or the traces.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from lightning_streamprof.distributed.exchange import StoreExchange

#: gathers a late post is looked for before it is given up
_CARRY = 2


@dataclass(frozen=True)
class HostLayout:
    """Which ranks share a host: ranks ``h * per_host .. (h + 1) * per_host - 1`` are host ``h`` (Lightning's and
    torchrun's global ranks: ``node_rank * local_world_size + local_rank``)."""

    world_size: int
    per_host: int

    @classmethod
    def of(cls, world_size: int, per_host: int | None) -> HostLayout:
        """The layout; ``per_host`` None, < 1 or not dividing ``world_size`` gives one host of every rank (rank 0
        then reads every rank's key itself: a flat gather)."""
        if per_host is None or per_host < 1 or world_size % per_host:
            per_host = world_size
        return cls(world_size, per_host)

    @property
    def hosts(self) -> int:
        return -(-self.world_size // self.per_host)

    def host(self, rank: int) -> int:
        return rank // self.per_host

    def leader(self, host: int) -> int:
        return host * self.per_host

    def members(self, host: int) -> range:
        return range(host * self.per_host, min((host + 1) * self.per_host, self.world_size))


@dataclass(frozen=True)
class Gathered:
    """What rank 0 received: one combined block per host that answered (its own first) and the ranks that did
    not answer (those of a silent host included)."""

    blocks: list[bytes]
    missing: list[int]
    hosts_missing: list[int]


#: a leader's combination of its host's payloads, rank -> the payloads it posted (late ones included)
Combine = Callable[[dict[int, list[bytes]]], bytes]


class TreeGather:
    """Hierarchical gathers over ``exchange`` (see the module docs)."""

    def __init__(self, exchange: StoreExchange, layout: HostLayout, timeout: float,
                 host_timeout: float | None = None) -> None:
        self.exchange, self.layout = exchange, layout
        self.timeout = timeout
        self.host_timeout = timeout / 2 if host_timeout is None else min(host_timeout, timeout)
        self._absent: set[str] = set()  # key names (ranks, "h<host>") not waited for until they post again
        self._late: list[tuple[int, str, str]] = []  # (gather number, tag, name) of posts not read yet
        self._count = 0

    @property
    def rank(self) -> int:
        return self.exchange.rank

    def is_leader(self) -> bool:
        return self.rank == self.layout.leader(self.layout.host(self.rank))

    def gather(self, tag: str, payload: bytes, combine: Combine, carry_late: bool = True) -> Gathered | None:
        """Post ``payload``; a leader combines its host's; rank 0 returns every host's block (others: None).
        ``tag`` must be new for each gather."""
        self._count += 1
        if not self.is_leader():
            self.exchange.post(tag, payload)
            return None
        began = time.monotonic()
        host = self.layout.host(self.rank)
        members = [r for r in self.layout.members(host) if r != self.rank]
        got, missing = self._collect(tag, [str(r) for r in members], self.host_timeout, carry_late)
        parts: dict[int, list[bytes]] = {self.rank: [payload]}
        for name, values in got.items():
            parts.setdefault(int(name), []).extend(values)
        block = combine(parts)
        missing_ranks = sorted(int(m) for m in missing)
        if self.rank != 0:
            self.exchange.post(tag, msgspec.msgpack.encode([block, missing_ranks]), rank=f"h{host}")
            return None
        others = [f"h{h}" for h in range(1, self.layout.hosts)]
        left = max(0.0, self.timeout - (time.monotonic() - began))
        got_hosts, silent = self._collect(tag, others, left, carry_late)
        blocks = [block]
        missing_all = set(missing_ranks)
        for values in got_hosts.values():
            for data in values:
                host_block, host_missing = msgspec.msgpack.decode(data, type=tuple[bytes, list[int]])
                blocks.append(host_block)
                missing_all.update(host_missing)
        hosts_missing = sorted(int(h[1:]) for h in silent)
        for h in hosts_missing:
            missing_all.update(self.layout.members(h))
        return Gathered(blocks=blocks, missing=sorted(missing_all), hosts_missing=hosts_missing)

    def _collect(self, tag: str, names: Sequence[str], timeout: float,
                 carry_late: bool) -> tuple[dict[str, list[bytes]], list[str]]:
        """Posts of ``names`` under ``tag`` (waiting at most ``timeout`` for those not absent last time) and the
        late posts of earlier gathers; the names that did not answer."""
        waited = [n for n in names if n not in self._absent]
        got = {n: [v] for n, v in self.exchange.collect_named(tag, waited, timeout).items()}
        for n, v in self.exchange.collect_named(tag, [n for n in names if n in self._absent], 0.0).items():
            got[n] = [v]
        if carry_late:
            here = set(names)
            late = [(g, t, n) for g, t, n in self._late if n in here and self._count - g <= _CARRY]
            found = self.exchange.peek([(t, n) for _, t, n in late])
            for (_, t, n), value in zip(late, found):
                if value is not None:
                    got.setdefault(n, []).insert(0, value)
            self._late = [item for item in self._late if item[2] not in here] + [
                item for item, value in zip(late, found) if value is None]
        missing = [n for n in names if n not in got]
        self._absent = (self._absent - set(got)) | set(missing)
        if carry_late:
            self._late += [(self._count, tag, n) for n in missing]
        return got, missing
