"""StreamProfiler's side of the distributed aggregation: every rank holds a :class:`LiveAggregator`.

- Window placement: when a window ends (the same step on every rank), the ranks agree on how far the overhead
  budget moves the next window (the largest deferral any rank asks for), so every rank records the same steps.
- Gather: a gather happens at a step fixed when a window ends (``gather_after`` steps after it, or the next
  window's first recorded step) and at the end of the stage: the same steps on every rank. Each rank posts the
  :class:`~lightning_streamprof.results.RankWindow` of every window it analysed since the last gather (about
  1 KB each as a :mod:`~lightning_streamprof.distributed.wire` table; windows analyse in a worker and are ready at
  different steps on different ranks, so a window not ready yet goes with a later gather). The gather is
  hierarchical (:mod:`.gather`): each host's local rank 0 waits at most half the ``timeout`` for its ranks and
  posts their rows as one table, rank 0 waits for the hosts' tables until ``timeout``. Once every rank has sent
  a window (or after two more gathers, or at the end: the others are then reported missing), rank 0 scores the
  concatenated table (:func:`~lightning_streamprof.analysis.scoring.score_table`), logs the numbers through the
  Trainer's loggers, warns once about a straggler or a silent rank, and writes ``streamprof/distributed.json``
  in the window's directory.
"""

from __future__ import annotations

import posixpath
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgspec

from lightning_streamprof.analysis.rank_table import RankTable, concat
from lightning_streamprof.analysis.scoring import score_table
from lightning_streamprof.distributed import wire
from lightning_streamprof.distributed.exchange import StoreExchange
from lightning_streamprof.distributed.gather import HostLayout, TreeGather
from lightning_streamprof.results import DistributedStats, RankWindow, Result, rank_ranges, to_json

#: the largest payload a rank sends for one window
PAYLOAD_LIMIT = 64 * 1024
#: the most bytes of rank payloads rank 0 receives for one window: at 16,384 ranks a rank sends at most 4 KiB
GATHER_BUDGET = 64 * 1024 * 1024
#: the smallest per-rank limit, whatever the world size
PAYLOAD_FLOOR = 2 * 1024
#: the file rank 0 writes beside each window's traces, in a folder of its own: HTA reads every *.json file of a
#: window directory as a trace
DISTRIBUTED_FILE = "streamprof/distributed.json"
#: above this world size, the per-rank metrics are logged for the stragglers only
PER_RANK_METRICS_MAX = 256
#: scored windows kept in :attr:`LiveAggregator.results` (the latest), and the most rank rows they may hold in all:
#: a 16,384-rank window is about 30 MB of results, and each window's are in its ``streamprof/distributed.json``
KEEP_WINDOWS = 64
KEEP_RANK_ROWS = 32_768
#: gathers a window may wait for a rank's late analysis before it is scored without that rank
_PATIENCE = 2


def payload_limit(world_size: int) -> int:
    """Bytes a rank may send for one window: :data:`PAYLOAD_LIMIT`, less in large worlds so that rank 0 receives
    at most :data:`GATHER_BUDGET` (never below :data:`PAYLOAD_FLOOR`)."""
    return max(PAYLOAD_FLOOR, min(PAYLOAD_LIMIT, GATHER_BUDGET // max(world_size, 1)))


def window_metrics(stats: DistributedStats, prefix: str = "streamprof") -> dict[str, float]:
    """``{prefix}/rank<R>/step_ms`` (and ``sync_ms``, ``transfer_ms``, ``relative_score``; every rank up to
    :data:`PER_RANK_METRICS_MAX` ranks, the stragglers only above), ``{prefix}/straggler_score`` (the lowest
    relative score), ``{prefix}/stragglers`` and ``{prefix}/missing_ranks`` (counts)."""
    out: dict[str, float] = {}
    every = len(stats.ranks) <= PER_RANK_METRICS_MAX
    for r in stats.ranks:
        if every or r.straggler:
            for name in ("step_ms", "sync_ms", "transfer_ms", "relative_score"):
                out[f"{prefix}/rank{r.rank}/{name}"] = float(getattr(r, name))
    if stats.ranks:
        out[f"{prefix}/straggler_score"] = min(r.relative_score for r in stats.ranks)
    out[f"{prefix}/stragglers"] = float(len(stats.stragglers))
    out[f"{prefix}/missing_ranks"] = float(len(stats.missing_ranks))
    return out


def payload(summary: RankWindow, limit: int = PAYLOAD_LIMIT) -> bytes:
    """One rank's window as a :mod:`~lightning_streamprof.distributed.wire` table; when over ``limit``, the
    collective calls of the last steps are left out (``trimmed``) until it fits."""
    steps = len(summary.step_numbers)
    while True:
        data = wire.encode(RankTable.from_windows([summary]))
        calls = summary.collectives
        if len(data) <= limit or not len(calls):
            return data
        steps = max(0, steps - 1) if steps else 0
        keep = [i for i, s in enumerate(calls.step) if 0 <= s < steps] if steps else []
        cut = msgspec.structs.replace(calls, **{f: [getattr(calls, f)[i] for i in keep] for f in
                                                ("name", "group", "seq", "step", "occurrence", "start_ns", "dur_ns",
                                                 "bytes", "hidden_ns") if len(getattr(calls, f)) == len(calls)})
        summary = msgspec.structs.replace(summary, collectives=cut, trimmed=True)


def host_block(parts: dict[int, list[bytes]]) -> bytes:
    """A leader's combination of its ranks' posts ({window: payload}): per window, the rows of every rank that
    sent it as one table, and which ranks sent it (an empty payload: the rank has no summary of it)."""
    tables: dict[int, list[RankTable]] = {}
    senders: dict[int, set[int]] = {}
    for rank, posts in parts.items():
        for data in posts:
            try:
                windows = msgspec.msgpack.decode(data, type=dict[int, bytes])
            except msgspec.DecodeError:
                continue  # a foreign or corrupt post: the rank is reported missing
            for window, part in windows.items():
                try:
                    table = wire.decode(part) if part else None
                except wire.WireError:
                    continue
                senders.setdefault(window, set()).add(rank)
                if table is not None:
                    tables.setdefault(window, []).append(table)
    block = {w: (wire.encode(concat(tables[w]), level=1) if tables.get(w) else b"", sorted(ranks))
             for w, ranks in senders.items()}
    return msgspec.msgpack.encode(block)


def _largest(parts: dict[int, list[bytes]]) -> bytes:
    return str(max(int(v) for posts in parts.values() for v in posts)).encode()


@dataclass
class _Pending:
    """Rank 0: what arrived of one window so far."""

    since: int
    tables: list[RankTable] = field(default_factory=list)
    senders: set[int] = field(default_factory=set)


class LiveAggregator:
    """Agrees on window placement, gathers each window to rank 0 (through the hosts' leaders) and scores it."""

    def __init__(
        self,
        exchange: StoreExchange,
        *,
        threshold: float,
        gather_after: int | None,
        log_metrics: Callable[[dict[str, float], int], None],
        global_step: Callable[[], int],
        per_host: int | None = None,
    ) -> None:
        self.exchange = exchange
        self.rank, self.world_size = exchange.rank, exchange.world_size
        self.tree = TreeGather(exchange, HostLayout.of(self.world_size, per_host), exchange.timeout)
        self.threshold, self.gather_after = threshold, gather_after
        self._log_metrics, self._global_step = log_metrics, global_step
        self.results: list[DistributedStats] = []  # rank 0: the latest scored windows (see KEEP_WINDOWS)
        self.best_median_ms: dict[int, float] = {}
        self._due: dict[int, int | None] = {}  # window -> the step its gather happens at (None: at the end)
        self._dirs: dict[int, str] = {}  # window -> its directory
        self._outbox: dict[int, bytes] = {}  # analysed windows not posted yet
        self._steps: dict[int, int] = {}  # window -> the trainer's global step when it was recorded
        self._pending: dict[int, _Pending] = {}  # rank 0
        self._gathers = 0
        self._ended_since_finish = 0  # windows ended since the last end-of-stage gather
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamprof-distributed")

    # ------------------------------------------------------------------ window placement
    def agree_defer(self, window: int, steps: int) -> int:
        """The deferral of the window after ``window``: the largest any rank asks for (own value on timeout)."""
        tag = f"p{window}"
        try:
            got = self.tree.gather(tag, str(steps).encode(), _largest, carry_late=False)
            if self.rank != 0:
                answer = self.exchange.wait_one(tag, "decision")
                return int(answer) if answer is not None else steps
            value = max([steps, *(int(b) for b in got.blocks)])
            self.exchange.post(tag, str(value).encode(), rank="decision")
            return value
        except Exception as err:  # noqa: BLE001 - never stop training over the exchange
            warnings.warn(f"StreamProfiler: could not agree on the next window with the other ranks: {err}",
                          stacklevel=2)
            return steps

    def broadcast_request(self, step: int, request: bytes, every: int) -> bytes:
        """Rank 0's ``request`` for a window (``b""``: none) on every rank, at ``step`` (a multiple of ``every``, the
        same step on every rank); rank 0 removes the decision of two such steps before, which every rank has read.
        An exchange that fails is a warning and no request."""
        tag = f"r{step}"
        try:
            if self.rank != 0:
                return self.exchange.wait_one(tag, "decision") or b""
            self.exchange.post(tag, request, rank="decision")
            self.exchange.remove(f"r{step - 2 * every}", "decision")
            return request
        except Exception as err:  # noqa: BLE001 - never stop training over the exchange
            warnings.warn(f"StreamProfiler: could not share a request for a window with the other ranks: {err}",
                          stacklevel=2)
            return b""

    # ------------------------------------------------------------------ windows
    def window_ended(self, window: int, stop: int, next_start: int | None, window_dir: str) -> None:
        """Window ``window`` recorded steps before ``stop`` (run-relative); fix its gather step."""
        due = next_start
        if self.gather_after is not None:
            due = stop + self.gather_after if next_start is None else min(stop + self.gather_after, next_start)
        self._due[window] = due
        self._dirs[window] = window_dir
        self._ended_since_finish += 1

    def add_local(self, window: int, analysis: Result | None, global_step: int) -> None:
        """This rank's analysed window (an empty payload when it has no summary: rank 0 need not wait for it)."""
        stats = analysis.distributed if analysis is not None else None
        limit = payload_limit(self.world_size)
        self._outbox[window] = payload(stats.summaries[0], limit) if stats is not None and stats.summaries else b""
        self._steps[window] = global_step

    def at_step(self, step: int) -> None:
        """Gather when a window's gather step has come (``step`` is run-relative, the same on every rank)."""
        due = [w for w, d in self._due.items() if d is not None and step >= d]
        if due:
            for w in due:
                del self._due[w]
            self._guard(self._gather, final=False)

    def finish(self) -> None:
        """The last gather of the stage (every window analysed by now; none when no window ended since the last
        one: Lightning finishes a stage twice), then wait for the files."""
        self._due.clear()
        if self._ended_since_finish:  # the same on every rank: their windows are the same
            self._ended_since_finish = 0
            self._guard(self._gather, final=True)
        self._writer.shutdown(wait=True)
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamprof-distributed")

    def _guard(self, fn: Callable[..., None], **kwargs: Any) -> None:
        try:
            fn(**kwargs)
        except Exception as err:  # noqa: BLE001 - the aggregation never stops training
            warnings.warn(f"StreamProfiler: distributed aggregation failed: {err!r}; training goes on", stacklevel=3)

    # ------------------------------------------------------------------ the gather
    def _gather(self, final: bool) -> None:
        """Every rank posts the windows it analysed since the last gather; rank 0 scores each window once every
        rank has sent it, after ``_PATIENCE`` more gathers without it, or at the end of the stage."""
        self._gathers += 1
        outbox, self._outbox = self._outbox, {}
        got = self.tree.gather(f"g{self._gathers}", msgspec.msgpack.encode(outbox), host_block)
        if got is None:
            return
        for block in got.blocks:
            for window, (data, senders) in msgspec.msgpack.decode(block, type=dict[int, tuple[bytes, list[int]]]).items():
                pending = self._pending.setdefault(window, _Pending(since=self._gathers))
                pending.senders.update(senders)
                if data:
                    pending.tables.append(wire.decode(data, widen=False))
        for window in sorted(self._pending):
            pending = self._pending[window]
            if final or len(pending.senders) >= self.world_size or self._gathers - pending.since >= _PATIENCE:
                del self._pending[window]
                self._score(window, pending)

    def _score(self, window: int, pending: _Pending) -> None:
        table = concat(pending.tables)
        pending.tables.clear()
        if not len(table):
            warnings.warn(f"StreamProfiler: window {window}: no rank's analysis could be gathered", stacklevel=4)
            return
        stats = score_table(table, self.threshold, world_size=self.world_size, best_median_ms=self.best_median_ms)
        silent = stats.missing_ranks
        for r in stats.ranks:
            if r.steps and r.median_own_ms > 0:
                self.best_median_ms[r.rank] = min(self.best_median_ms.get(r.rank, r.median_own_ms), r.median_own_ms)
        self.results.append(stats)
        while len(self.results) > 1 and (len(self.results) > KEEP_WINDOWS or
                                         sum(len(r.ranks) for r in self.results) > KEEP_RANK_ROWS):
            del self.results[0]
        self._log_metrics(window_metrics(stats), self._steps.pop(window, None) or self._global_step())
        if stats.message:
            warnings.warn(f"StreamProfiler: window {window}: {stats.message}", stacklevel=4)
        if silent:
            unanswered = sorted(set(range(self.world_size)) - pending.senders)
            why = (f"no answer within {self.exchange.timeout:g} s (rank(s) {rank_ranges(unanswered)})" if unanswered
                   else "no analysis")
            warnings.warn(f"StreamProfiler: window {window}: rank(s) {rank_ranges(silent)} sent no summary ({why}); "
                          "scored without them", stacklevel=4)
        window_dir = self._dirs.pop(window, None)
        if window_dir is not None:
            self._writer.submit(_write, posixpath.join(window_dir, DISTRIBUTED_FILE), to_json(stats))


def _write(path: str, data: bytes) -> None:
    from lightning_streamprof.output import write_atomic

    try:
        write_atomic(path, data)
    except Exception as err:  # noqa: BLE001
        warnings.warn(f"StreamProfiler: could not write {path}: {err}", stacklevel=2)


def make_aggregator(run_name: str, rank: int, world_size: int, **kwargs: Any) -> LiveAggregator | None:
    """An aggregator over the default process group's store, or None outside a multi-rank process group.
    ``per_host``: ranks per host (the hierarchy of the gather; None: one level)."""
    from lightning_streamprof.distributed.exchange import default_store

    store = default_store() if world_size > 1 else None
    if store is None:
        return None
    timeout = kwargs.pop("timeout")
    exchange = StoreExchange(store, rank, world_size, prefix=f"streamprof/{run_name}", timeout=timeout)
    return LiveAggregator(exchange, **kwargs)
