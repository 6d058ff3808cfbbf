"""The bytes a :class:`~lightning_streamprof.analysis.rank_table.RankTable` travels as through the store.

Each column is stored raw in the narrowest integer type that holds it (times after subtracting the table's
earliest one), the whole msgpack-encoded and zlib-compressed: a rank's window of 3 steps and 60 collective calls
is about 1 KB, and a host's table (its ranks' rows concatenated) or rank 0's (every host's) decodes with one
NumPy view per column, never one Python object per rank.
"""

from __future__ import annotations

import zlib
from dataclasses import fields

import msgspec
import numpy as np

from lightning_streamprof.analysis.rank_table import STRING_TABLES, RankTable

#: the format's version (a table of another version is refused)
VERSION = 1
#: columns holding absolute times (ns): stored relative to the table's earliest time
_TIMES = ("step_start", "step_end", "call_start")
_NARROW = (np.int8, np.int16, np.int32)


class WireError(ValueError):
    """Bytes that are not an encoded table of this version."""


def _narrow(values: np.ndarray) -> np.ndarray:
    if not values.size:
        return values.astype(np.int8)
    lo, hi = int(values.min()), int(values.max())
    for dtype in _NARROW:
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return values.astype(dtype)
    return values


def encode(table: RankTable, level: int = 6) -> bytes:
    """``table`` as compressed bytes."""
    times = [getattr(table, c) for c in _TIMES if getattr(table, c).size]
    base = int(min(int(t.min()) for t in times)) if times else 0
    columns = {}
    for f in fields(RankTable):
        if f.name in STRING_TABLES:
            continue
        values = getattr(table, f.name)
        column = _narrow(values - base if f.name in _TIMES else values)
        columns[f.name] = (column.dtype.str, column.tobytes())
    plain = {"v": VERSION, "base": base, "columns": columns, **{t: list(getattr(table, t)) for t in STRING_TABLES}}
    return zlib.compress(msgspec.msgpack.encode(plain), level)


def decode(data: bytes, widen: bool = True) -> RankTable:
    """The table encoded by :func:`encode`; :class:`WireError` for anything else. With ``widen`` False the
    columns other than times keep their stored (narrower) integer types, as parts to
    :func:`~lightning_streamprof.analysis.rank_table.concat` (which widens them): a fraction of the memory."""
    try:
        plain = msgspec.msgpack.decode(zlib.decompress(data))
        if plain.get("v") != VERSION:
            raise WireError(f"table format {plain.get('v')!r}, expected {VERSION}")
        base = int(plain["base"])
        out: dict = {t: tuple(plain[t]) for t in STRING_TABLES}
        for f in fields(RankTable):
            if f.name in STRING_TABLES:
                continue
            dtype, raw = plain["columns"][f.name]
            values = np.frombuffer(raw, dtype=np.dtype(dtype))
            out[f.name] = (values.astype(np.int64) + base if f.name in _TIMES else
                           values.astype(np.int64) if widen else values)
        return _checked(RankTable(**out))
    except WireError:
        raise
    except Exception as err:  # noqa: BLE001 - corrupt or foreign bytes: one error type
        raise WireError(f"not an encoded table: {err!r}") from None


def _checked(t: RankTable) -> RankTable:
    """``t`` when its columns agree with each other (lengths, counts, string indices), else :class:`WireError`."""
    n = len(t)
    rows = ("world_size", "window", "first_step", "trimmed", "host", "steps", "calls")
    if any(getattr(t, c).size != n for c in rows) or (t.steps < 0).any() or (t.calls < 0).any():
        raise WireError("row columns of different lengths")
    if any(getattr(t, c).size != int(t.steps.sum()) for c in ("step_number", "step_start", "step_end", "comp", "comm",
                                                               "overlap", "dataloader")):
        raise WireError("step columns do not match the step counts")
    calls = int(t.calls.sum())
    if any(getattr(t, c).size != calls for c in ("call_name", "call_group", "seq", "call_step", "occurrence",
                                                  "call_start", "call_dur", "call_bytes", "hidden")):
        raise WireError("call columns do not match the call counts")
    for column, table in (("host", t.hosts), ("call_name", t.names), ("call_group", t.groups)):
        values = getattr(t, column)
        if values.size and (int(values.max()) >= len(table) or int(values.min()) < (-1 if column == "host" else 0)):
            raise WireError(f"{column} indexes outside its string table")
    return t
