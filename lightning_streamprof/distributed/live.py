"""StreamProfiler's side of the distributed aggregation: every rank holds a :class:`LiveAggregator`.

- Window placement: when a window ends (the same step on every rank), the ranks agree on how far the overhead
  budget moves the next window (the largest deferral any rank asks for), so every rank records the same steps.
- Gather: a gather happens at a step fixed when a window ends (``gather_after`` steps after it, or the next
  window's first recorded step) and at the end of the stage: the same steps on every rank. Each rank posts the
  :class:`~lightning_streamprof.results.RankWindow` of every window it analysed since the last gather (a few
  KB each; windows analyse in a worker and are ready at different steps on different ranks, so a window not
  ready yet goes with a later gather) through the store; rank 0 waits at most ``timeout`` seconds. Once every
  rank has sent a window (or after two more gathers, or at the end: the others are then reported missing),
  rank 0 merges the states into a :class:`~lightning_streamprof.distributed.state.WindowTable`, scores it,
  logs the numbers through the Trainer's loggers, warns once about a straggler or a silent rank, and writes
  ``streamprof/distributed.json`` in the window's directory.
"""

from __future__ import annotations

import posixpath
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec

from lightning_streamprof.distributed.exchange import StoreExchange
from lightning_streamprof.distributed.state import WindowTable, decode_state, encode_state, merge_states
from lightning_streamprof.results import DistributedStats, RankWindow, Result, to_json

#: the largest payload a rank sends for one window
PAYLOAD_LIMIT = 64 * 1024
#: the file rank 0 writes beside each window's traces, in a folder of its own: HTA reads every *.json file of a
#: window directory as a trace
DISTRIBUTED_FILE = "streamprof/distributed.json"
#: gathers a window may wait for a rank's late analysis before it is scored without that rank
_PATIENCE = 2


def window_metrics(stats: DistributedStats, prefix: str = "streamprof") -> dict[str, float]:
    """``{prefix}/rank<R>/step_ms`` (and ``sync_ms``, ``transfer_ms``, ``relative_score``),
    ``{prefix}/straggler_score`` (the lowest relative score), ``{prefix}/stragglers`` and
    ``{prefix}/missing_ranks`` (counts)."""
    out: dict[str, float] = {}
    for r in stats.ranks:
        for name in ("step_ms", "sync_ms", "transfer_ms", "relative_score"):
            out[f"{prefix}/rank{r.rank}/{name}"] = float(getattr(r, name))
    if stats.ranks:
        out[f"{prefix}/straggler_score"] = min(r.relative_score for r in stats.ranks)
    out[f"{prefix}/stragglers"] = float(len(stats.stragglers))
    out[f"{prefix}/missing_ranks"] = float(len(stats.missing_ranks))
    return out


def payload(summary: RankWindow, limit: int = PAYLOAD_LIMIT) -> bytes:
    """The encoded states of one rank's window; when over ``limit``, the collective calls of the last steps
    are left out (``trimmed``) until it fits."""
    steps = len(summary.step_numbers)
    while True:
        table = WindowTable()
        table.update(summary)
        data = encode_state(table.metric_state)
        calls = summary.collectives
        if len(data) <= limit or not len(calls):
            return data
        steps = max(0, steps - 1) if steps else 0
        keep = [i for i, s in enumerate(calls.step) if 0 <= s < steps] if steps else []
        cut = msgspec.structs.replace(calls, **{f: [getattr(calls, f)[i] for i in keep] for f in
                                                ("name", "group", "seq", "step", "occurrence", "start_ns", "dur_ns",
                                                 "bytes")})
        summary = msgspec.structs.replace(summary, collectives=cut, trimmed=True)


class LiveAggregator:
    """Agrees on window placement, gathers each window to rank 0 and scores it there."""

    def __init__(
        self,
        exchange: StoreExchange,
        *,
        threshold: float,
        gather_after: int | None,
        log_metrics: Callable[[dict[str, float], int], None],
        global_step: Callable[[], int],
    ) -> None:
        self.exchange = exchange
        self.rank, self.world_size = exchange.rank, exchange.world_size
        self.threshold, self.gather_after = threshold, gather_after
        self._log_metrics, self._global_step = log_metrics, global_step
        self.results: list[DistributedStats] = []  # rank 0: one per gathered window
        self.best_median_ms: dict[int, float] = {}
        self._due: dict[int, int | None] = {}  # window -> the step its gather happens at (None: at the end)
        self._dirs: dict[int, str] = {}  # window -> its directory
        self._outbox: dict[int, bytes] = {}  # analysed windows not posted yet
        self._steps: dict[int, int] = {}  # window -> the trainer's global step when it was recorded
        self._pending: dict[int, tuple[dict[int, bytes], int]] = {}  # rank 0: window -> (parts by rank, gather)
        self._gathers = 0
        self._ended_since_finish = 0  # windows ended since the last end-of-stage gather
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamprof-distributed")

    # ------------------------------------------------------------------ window placement
    def agree_defer(self, window: int, steps: int) -> int:
        """The deferral of the window after ``window``: the largest any rank asks for (own value on timeout)."""
        tag = f"p{window}"
        try:
            if self.rank != 0:
                self.exchange.post(tag, str(steps).encode())
                got = self.exchange.wait_one(tag, "decision")
                return int(got) if got is not None else steps
            asked = self.exchange.collect(tag, ranks=range(1, self.world_size))
            value = max([steps, *(int(v) for v in asked.values())])
            self.exchange.post(tag, str(value).encode(), rank="decision")
            return value
        except Exception as err:  # noqa: BLE001 - never stop training over the exchange
            warnings.warn(f"StreamProfiler: could not agree on the next window with the other ranks: {err}",
                          stacklevel=2)
            return steps

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
        self._outbox[window] = payload(stats.summaries[0]) if stats is not None and stats.summaries else b""
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
        tag = f"g{self._gathers}"
        outbox, self._outbox = self._outbox, {}
        mine = msgspec.msgpack.encode(outbox)
        if self.rank != 0:
            self.exchange.post(tag, mine)
            return
        got = self.exchange.collect(tag, ranks=range(1, self.world_size))
        got[0] = mine
        for rank, data in got.items():
            for window, part in msgspec.msgpack.decode(data, type=dict[int, bytes]).items():
                self._pending.setdefault(window, ({}, self._gathers))[0][rank] = part
        for window in sorted(self._pending):
            parts, since = self._pending[window]
            if final or len(parts) == self.world_size or self._gathers - since >= _PATIENCE:
                del self._pending[window]
                self._score(window, parts)

    def _score(self, window: int, parts: dict[int, bytes]) -> None:
        table = WindowTable(threshold=self.threshold, sync_on_compute=False)
        table.best_median_ms = dict(self.best_median_ms)
        merge_states(table, [decode_state(data) for data in parts.values() if data])
        silent = sorted(set(range(self.world_size)) - {r for r, d in parts.items() if d})
        if not table.rank:
            warnings.warn(f"StreamProfiler: window {window}: no rank's analysis could be gathered", stacklevel=4)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torchmetrics: compute() on merged states without update()
            stats = table.compute()
        stats = msgspec.structs.replace(stats, missing_ranks=silent, world_size=self.world_size,
                                        windows=[msgspec.structs.replace(w, missing_ranks=silent)
                                                 for w in stats.windows])
        for r in stats.ranks:
            if r.steps and r.median_own_ms > 0:
                self.best_median_ms[r.rank] = min(self.best_median_ms.get(r.rank, r.median_own_ms), r.median_own_ms)
        self.results.append(stats)
        self._log_metrics(window_metrics(stats), self._steps.pop(window, None) or self._global_step())
        if stats.message:
            warnings.warn(f"StreamProfiler: window {window}: {stats.message}", stacklevel=4)
        if silent:
            warnings.warn(f"StreamProfiler: window {window}: rank(s) {', '.join(map(str, silent))} sent no summary "
                          f"(no answer within {self.exchange.timeout:g} s, or no analysis); scored without them",
                          stacklevel=4)
        window_dir = self._dirs.pop(window, None)
        if window_dir is not None:
            self._writer.submit(_write, posixpath.join(window_dir, DISTRIBUTED_FILE), to_json(stats))


def _write(path: str, data: bytes) -> None:
    from lightning_streamprof.profiling.storage import write_atomic

    try:
        write_atomic(path, data)
    except Exception as err:  # noqa: BLE001
        warnings.warn(f"StreamProfiler: could not write {path}: {err}", stacklevel=2)


def make_aggregator(run_name: str, rank: int, world_size: int, **kwargs: Any) -> LiveAggregator | None:
    """An aggregator over the default process group's store, or None outside a multi-rank process group."""
    from lightning_streamprof.distributed.exchange import default_store

    store = default_store() if world_size > 1 else None
    if store is None:
        return None
    timeout = kwargs.pop("timeout")
    exchange = StoreExchange(store, rank, world_size, prefix=f"streamprof/{run_name}", timeout=timeout)
    return LiveAggregator(exchange, **kwargs)
