"""What each rank contributes for a window, declared the torchmetrics way.

Every state is a list of tensors with ``dist_reduce_fx="cat"``: one entry per rank, so the gathered table is
the concatenation of the ranks' rows and :meth:`WindowTable.compute` is a pure function of it
(:func:`lightning_streamprof.analysis.scoring.score`). Strings (host, collective and group names) travel as
UTF-8 bytes in a ``uint8`` state.

The states are gathered by :mod:`.exchange` (the process group's store, with a timeout) and merged on rank 0
with torchmetrics' own :meth:`~torchmetrics.Metric.merge_state`, not by torchmetrics' ``sync``: that is an
``all_gather`` per state, which waits for every rank without a timeout and must be entered by every rank at
the same time.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np
import torch
from torchmetrics import Metric

from lightning_streamprof.analysis.scoring import THRESHOLD, score
from lightning_streamprof.results import CollectiveCalls, DistributedStats, RankWindow

#: per-rank scalars: rank, world size (-1 unknown), window (-1 none), first step (-1 none), trimmed (0/1)
_ROW = ("rank", "world_size", "window", "first_step", "trimmed")
#: per-step columns -> RankWindow field
_STEPS = {"step_number": "step_numbers", "step_start": "step_start_ns", "step_end": "step_end_ns",
          "comp": "comp_ns", "comm": "comm_ns", "overlap": "overlap_ns", "dataloader": "dataloader_ns"}
#: per-call columns -> CollectiveCalls field
_CALLS = {"call_name": "name", "call_group": "group", "call_seq": "seq", "call_step": "step",
          "call_occurrence": "occurrence", "call_start": "start_ns", "call_dur": "dur_ns", "call_bytes": "bytes"}
_SEP = "\x1f"


def _opt(value: int | None) -> int:
    return -1 if value is None else int(value)


def _back(value: int) -> int | None:
    return None if value < 0 else value


class WindowTable(Metric):
    """The gathered table of one window: :meth:`update` adds a rank's :class:`RankWindow`, :meth:`compute`
    scores every rank added or merged (:meth:`merge_state`) so far."""

    full_state_update = False
    is_differentiable = False
    higher_is_better = None

    def __init__(self, threshold: float = THRESHOLD, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold = threshold
        self.best_median_ms: dict[int, float] = {}
        for name in (*_ROW, *_STEPS, *_CALLS, "strings", "string_counts"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, summary: RankWindow) -> None:
        """Add one rank's window (every state gets one entry)."""
        s, c = summary, summary.collectives
        row = (s.rank, _opt(s.world_size), _opt(s.window), _opt(s.first_step), int(s.trimmed))
        for name, value in zip(_ROW, row):
            getattr(self, name).append(torch.tensor([value], dtype=torch.long))
        for name, field in _STEPS.items():
            getattr(self, name).append(torch.tensor(getattr(s, field), dtype=torch.long))
        for name, field in _CALLS.items():
            getattr(self, name).append(torch.tensor(getattr(c, field), dtype=torch.long))
        text = _SEP.join([s.host or "", *c.names, *c.groups]).encode()
        self.strings.append(torch.frombuffer(bytearray(text), dtype=torch.uint8) if text else
                            torch.zeros(0, dtype=torch.uint8))
        self.string_counts.append(torch.tensor([len(c.names), len(c.groups), int(s.host is not None)],
                                               dtype=torch.long))

    def rows(self) -> list[RankWindow]:
        """The gathered table as one :class:`RankWindow` per rank, in rank order."""
        out = []
        for i in range(len(self.rank)):
            counts = self.string_counts[i].numpy().tolist()
            parts = bytes(self.strings[i].numpy()).decode().split(_SEP)
            parts += [""] * (1 + counts[0] + counts[1] - len(parts))
            names, groups = parts[1:1 + counts[0]], parts[1 + counts[0]:1 + counts[0] + counts[1]]
            calls = CollectiveCalls(names=names, groups=groups,
                                    **{f: getattr(self, n)[i].numpy().tolist() for n, f in _CALLS.items()})
            rank, world, window, first, trimmed = (int(getattr(self, n)[i][0]) for n in _ROW)
            out.append(RankWindow(rank=rank, world_size=_back(world), host=parts[0] if counts[2] else None,
                                  window=_back(window), first_step=_back(first), trimmed=bool(trimmed),
                                  collectives=calls, **{f: getattr(self, n)[i].numpy().tolist() for n, f in _STEPS.items()}))
        return sorted(out, key=lambda r: r.rank)

    def compute(self) -> DistributedStats:
        """Scores of the gathered table (``best_median_ms``: earlier windows' bests, for individual scores)."""
        return score(self.rows(), self.threshold, best_median_ms=self.best_median_ms)


def merge_states(table: WindowTable, states: list[dict[str, list[torch.Tensor]]]) -> None:
    """Merge many ranks' states at once (one :meth:`~torchmetrics.Metric.merge_state` of their concatenation:
    merging them one by one would copy the growing lists again for every rank)."""
    if states:
        table.merge_state({name: [t for state in states for t in state[name]] for name in states[0]})


def encode_state(state: Mapping[str, list[torch.Tensor]]) -> bytes:
    """A rank's states (one entry each) as compressed bytes, for the store."""
    plain = {name: [(t.numpy().dtype.str, t.numpy().tobytes()) for t in values] for name, values in state.items()}
    return zlib.compress(msgspec.msgpack.encode(plain), 1)


def decode_state(data: bytes) -> dict[str, list[torch.Tensor]]:
    """The states encoded by :func:`encode_state`."""
    plain = msgspec.msgpack.decode(zlib.decompress(data))
    return {name: [torch.from_numpy(np.frombuffer(raw, dtype=np.dtype(dtype)).copy()) for dtype, raw in values]
            for name, values in plain.items()}
