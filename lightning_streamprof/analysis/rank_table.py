"""Many ranks' windows as one columnar table, the table the distributed scores are computed from.

A :class:`RankTable` holds :class:`~lightning_streamprof.results.RankWindow` rows column by column: one entry per
rank row, per step and per collective call, with the strings (hosts, collective and group names) in tables of
their own. Every column gathers by concatenation (torchmetrics' ``dist_reduce_fx="cat"``): the table of several
ranks, hosts or windows is :func:`concat` of theirs, strings re-indexed, so a host can merge its ranks' tables
and rank 0 its hosts' without one Python object per rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from lightning_streamprof.results import CollectiveCalls, RankWindow

#: per rank row: column -> RankWindow field (-1 where the field is None)
ROW_COLUMNS = {"rank": "rank", "world_size": "world_size", "window": "window", "first_step": "first_step",
               "trimmed": "trimmed"}
#: per step: column -> RankWindow field
STEP_COLUMNS = {"step_number": "step_numbers", "step_start": "step_start_ns", "step_end": "step_end_ns",
                "comp": "comp_ns", "comm": "comm_ns", "overlap": "overlap_ns", "dataloader": "dataloader_ns"}
#: per collective call: column -> CollectiveCalls field
CALL_COLUMNS = {"call_name": "name", "call_group": "group", "seq": "seq", "call_step": "step",
                "occurrence": "occurrence", "call_start": "start_ns", "call_dur": "dur_ns", "call_bytes": "bytes",
                "hidden": "hidden_ns"}
#: columns that index a string table
STRING_COLUMNS = {"host": "hosts", "call_name": "names", "call_group": "groups"}
_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True, eq=False)
class RankTable:
    """Rows of rank windows, column by column (int64 arrays; see the module docs).

    ``steps``/``calls`` are each row's number of steps and calls: row ``i``'s steps are the ``steps[i]``
    entries of the step columns after those of rows ``0..i-1`` (the same for calls). ``host`` indexes ``hosts``
    (-1: unknown); ``call_name``/``call_group`` index ``names``/``groups``; ``hidden`` is -1 where unknown.
    """

    rank: np.ndarray
    world_size: np.ndarray
    window: np.ndarray
    first_step: np.ndarray
    trimmed: np.ndarray
    host: np.ndarray
    steps: np.ndarray
    calls: np.ndarray
    step_number: np.ndarray
    step_start: np.ndarray
    step_end: np.ndarray
    comp: np.ndarray
    comm: np.ndarray
    overlap: np.ndarray
    dataloader: np.ndarray
    call_name: np.ndarray
    call_group: np.ndarray
    seq: np.ndarray
    call_step: np.ndarray
    occurrence: np.ndarray
    call_start: np.ndarray
    call_dur: np.ndarray
    call_bytes: np.ndarray
    hidden: np.ndarray
    hosts: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.rank.size)

    @property
    def step_row(self) -> np.ndarray:
        """For each step, its row."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.steps)

    @property
    def call_row(self) -> np.ndarray:
        """For each call, its row."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.calls)

    @classmethod
    def empty(cls) -> RankTable:
        return cls(**{f.name: _EMPTY for f in fields(cls) if f.name not in STRING_TABLES})

    @classmethod
    def from_windows(cls, rows: Sequence[RankWindow]) -> RankTable:
        """The table of ``rows`` (in their order)."""
        if not rows:
            return cls.empty()
        hosts: dict[str, int] = {}
        names: dict[str, int] = {}
        groups: dict[str, int] = {}
        cols: dict[str, list] = {name: [] for name in (*ROW_COLUMNS, "host", "steps", "calls", *STEP_COLUMNS,
                                                       *CALL_COLUMNS)}
        for r in rows:
            c = r.collectives
            for col, f in ROW_COLUMNS.items():
                value = getattr(r, f)
                cols[col].append(-1 if value is None else int(value))
            cols["host"].append(-1 if r.host is None else hosts.setdefault(r.host, len(hosts)))
            cols["steps"].append(len(r.step_start_ns))
            cols["calls"].append(len(c))
            for col, f in STEP_COLUMNS.items():
                cols[col].append(getattr(r, f))
            name_ids = np.array([names.setdefault(n, len(names)) for n in c.names] or [0], np.int64)
            group_ids = np.array([groups.setdefault(g, len(groups)) for g in c.groups] or [0], np.int64)
            for col, f in CALL_COLUMNS.items():
                values = getattr(c, f)
                if col == "hidden" and len(values) != len(c):
                    values = [-1] * len(c)  # a window analysed before hidden time was measured
                values = np.asarray(values, np.int64)
                if col == "call_name":
                    values = name_ids[values] if values.size else values
                elif col == "call_group":
                    values = group_ids[values] if values.size else values
                cols[col].append(values)
        out = {}
        for col, values in cols.items():
            if col in STEP_COLUMNS or col in CALL_COLUMNS:
                parts = [np.asarray(v, np.int64) for v in values]
                out[col] = np.concatenate(parts) if parts else _EMPTY
            else:
                out[col] = np.asarray(values, np.int64)
        return cls(**out, hosts=tuple(hosts), names=tuple(names), groups=tuple(groups))

    def to_windows(self) -> list[RankWindow]:
        """One :class:`RankWindow` per row (each with its own string tables)."""
        step_end, call_end = np.cumsum(self.steps), np.cumsum(self.calls)
        out = []
        for i in range(len(self)):
            s = slice(int(step_end[i] - self.steps[i]), int(step_end[i]))
            k = slice(int(call_end[i] - self.calls[i]), int(call_end[i]))
            name_ids, name = _local(self.call_name[k])
            group_ids, group = _local(self.call_group[k])
            calls = {f: getattr(self, col)[k].tolist() for col, f in CALL_COLUMNS.items()}
            calls.update(name=name, group=group, names=[self.names[j] for j in name_ids],
                         groups=[self.groups[j] for j in group_ids])
            if (self.hidden[k] < 0).any():
                calls["hidden_ns"] = []
            row = {f: _back(int(getattr(self, col)[i])) for col, f in ROW_COLUMNS.items()}
            row["rank"], row["trimmed"] = int(self.rank[i]), bool(self.trimmed[i])
            host = int(self.host[i])
            out.append(RankWindow(**row, host=self.hosts[host] if host >= 0 else None,
                                  collectives=CollectiveCalls(**calls),
                                  **{f: getattr(self, col)[s].tolist() for col, f in STEP_COLUMNS.items()}))
        return out

    def take(self, rows: np.ndarray) -> RankTable:
        """The table of ``rows`` (indices, in that order)."""
        rows = np.asarray(rows, np.int64)
        step_first = np.cumsum(self.steps) - self.steps
        call_first = np.cumsum(self.calls) - self.calls
        step_idx = _ranges(step_first[rows], self.steps[rows])
        call_idx = _ranges(call_first[rows], self.calls[rows])
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in STRING_TABLES:
                out[f.name] = value
            elif f.name in STEP_COLUMNS:
                out[f.name] = value[step_idx]
            elif f.name in CALL_COLUMNS:
                out[f.name] = value[call_idx]
            else:
                out[f.name] = value[rows]
        return RankTable(**out)


STRING_TABLES = frozenset(STRING_COLUMNS.values())


def _local(ids: np.ndarray) -> tuple[list[int], list[int]]:
    """A row's own string table (global ids in order of first use) and its column re-indexed into it."""
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank_of = np.empty_like(order)
    rank_of[order] = np.arange(order.size)
    return uniq[order].tolist(), rank_of[inverse.reshape(-1)].tolist()


def _back(value: int) -> int | None:
    return None if value < 0 else value


def _ranges(first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices ``first[i] .. first[i] + counts[i] - 1`` of every ``i``, concatenated."""
    total = int(counts.sum()) if counts.size else 0
    if not total:
        return _EMPTY
    starts = np.repeat(first - (np.cumsum(counts) - counts), counts)
    return starts + np.arange(total, dtype=np.int64)


def concat(tables: Sequence[RankTable]) -> RankTable:
    """The rows of every table, in order, as one table of int64 columns (string tables merged, their columns
    re-indexed; the parts may hold narrower integer types, as :mod:`~lightning_streamprof.distributed.wire` reads
    them)."""
    tables = [t for t in tables if len(t)]
    if not tables:
        return RankTable.empty()
    if len(tables) == 1 and all(getattr(tables[0], f.name).dtype == np.int64 for f in fields(RankTable)
                                if f.name not in STRING_TABLES):
        return tables[0]
    merged: dict[str, dict[str, int]] = {table: {} for table in STRING_TABLES}
    remapped: dict[str, list[np.ndarray]] = {col: [] for col in STRING_COLUMNS}
    for t in tables:
        for col, table in STRING_COLUMNS.items():
            index = merged[table]
            ids = np.array([index.setdefault(s, len(index)) for s in getattr(t, table)] or [0], np.int64)
            values = getattr(t, col)
            remapped[col].append(np.where(values >= 0, ids[np.clip(values, 0, None)], -1) if values.size else values)
    out = {}
    for f in fields(RankTable):
        if f.name in STRING_TABLES:
            out[f.name] = tuple(merged[f.name])
        else:
            parts = remapped[f.name] if f.name in STRING_COLUMNS else [getattr(t, f.name) for t in tables]
            out[f.name] = np.concatenate(parts, dtype=np.int64)
    return RankTable(**out)
