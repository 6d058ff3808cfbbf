"""What each rank contributes for a window, declared the torchmetrics way: the columns of a
:class:`~lightning_streamprof.analysis.rank_table.RankTable`, every one a list state with ``dist_reduce_fx="cat"``.

:meth:`WindowTable.compute` is a pure function of the gathered table
(:func:`lightning_streamprof.analysis.scoring.score_table`), so a program that can enter a collective on every
rank at once may gather the table with torchmetrics' own ``sync`` or :meth:`~torchmetrics.Metric.merge_state`.
The live gather does not: ``sync`` is an ``all_gather`` per state that waits for every rank without a timeout,
and one tensor per column per rank costs rank 0 seconds at 16,384 ranks. It sends each rank's table as bytes
(:mod:`.wire`) through the store, host by host (:mod:`.tree`), and concatenates them: the same reduction.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import msgspec
import numpy as np
import torch
from torchmetrics import Metric

from lightning_streamprof.analysis.rank_table import STRING_TABLES, RankTable, concat
from lightning_streamprof.analysis.scoring import THRESHOLD, score_table
from lightning_streamprof.results import DistributedStats, RankWindow

#: the table's numeric columns: one state each (and ``strings``: the string tables, msgpack bytes as ``uint8``)
COLUMNS = tuple(f.name for f in fields(RankTable) if f.name not in STRING_TABLES)
_STRINGS = tuple(sorted(STRING_TABLES))


class WindowTable(Metric):
    """The gathered table of one window: :meth:`update` adds a rank's :class:`RankWindow`, :meth:`compute`
    scores every rank added or merged so far."""

    full_state_update = False
    is_differentiable = False
    higher_is_better = None

    def __init__(self, threshold: float = THRESHOLD, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threshold = threshold
        self.best_median_ms: dict[int, float] = {}
        for name in (*COLUMNS, "strings"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, summary: RankWindow) -> None:
        """Add one rank's window (every state gets one entry)."""
        t = RankTable.from_windows([summary])
        for name in COLUMNS:
            getattr(self, name).append(torch.from_numpy(getattr(t, name).copy()))
        text = msgspec.msgpack.encode([getattr(t, name) for name in _STRINGS])
        self.strings.append(torch.frombuffer(bytearray(text), dtype=torch.uint8))

    def table(self) -> RankTable:
        """The gathered rows as one table, in the order they were added."""
        parts = []
        for i in range(len(self.rank)):
            strings = msgspec.msgpack.decode(bytes(self.strings[i].numpy()))
            parts.append(RankTable(**{n: getattr(self, n)[i].numpy().astype(np.int64) for n in COLUMNS},
                                   **{name: tuple(v) for name, v in zip(_STRINGS, strings)}))
        return concat(parts)

    def rows(self) -> list[RankWindow]:
        """The gathered table as one :class:`RankWindow` per rank, in rank order."""
        return sorted(self.table().to_windows(), key=lambda r: r.rank)

    def compute(self) -> DistributedStats:
        """Scores of the gathered table (``best_median_ms``: earlier windows' bests, for individual scores)."""
        return score_table(self.table(), self.threshold, best_median_ms=self.best_median_ms)


def merge_states(table: WindowTable, states: list[dict[str, list[torch.Tensor]]]) -> None:
    """Merge many ranks' states at once (one :meth:`~torchmetrics.Metric.merge_state` of their concatenation:
    merging them one by one would copy the growing lists again for every rank)."""
    if states:
        table.merge_state({name: [t for state in states for t in state[name]] for name in states[0]})
