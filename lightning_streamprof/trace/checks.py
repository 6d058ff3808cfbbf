"""What a trace may hold: numbers that fit their column, metadata of the documented types, values that can be true.

Numbers out of range and metadata of the wrong type make the trace unreadable (:class:`OutOfRange`, turned into
:class:`~lightning_streamprof.trace.TraceFormatError` by the readers). Values that parse but cannot be true are
left out of the table by :func:`clean`, which says in ``EventTable.warnings`` what it ignored: events without a
timestamp or (complete events) a duration, negative durations, exact duplicates, occupancy outside 0..100%,
negative or infinite blocks per SM, negative memory totals.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from lightning_streamprof.trace.table import COLUMNS, EventTable, Kind

#: marks a missing ``ts`` or (complete event) ``dur`` until :func:`clean` drops the event
MISSING = np.iinfo(np.int64).min
#: timestamps (ns) must lie in [0, TS_LIMIT): sums and spans of them then fit in 64 bits
TS_LIMIT = 2**62
#: durations (ns) must lie below DUR_LIMIT (about 13 days)
DUR_LIMIT = 2**50
_INT64 = (-(2**63), 2**63 - 1)
#: the range of each integer column narrower than 64 bits (its values also -1 for absent)
INT_RANGES: dict[str, tuple[int, int]] = {
    name: (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    for name, dtype, _ in COLUMNS if np.issubdtype(dtype, np.integer)
}
INT_RANGES.update(device=(-1, 2**15 - 1), stream=(-1, 2**31 - 1), device_type=(-1, 127))
#: the JSON key each column comes from, for messages
KEYS = {"device": "args.device", "stream": "args.stream", "device_type": "args.Device Type",
        "external_id": "args.External id", "correlation": "args.correlation", "bytes": "args.bytes",
        "total_allocated": "args.Total Allocated", "total_reserved": "args.Total Reserved", "addr": "args.Addr",
        "python_id": "args.Python id", "python_parent_id": "args.Python parent id"}


class OutOfRange(ValueError):
    """A number that does not fit its column, or metadata of the wrong type; the message is the reason."""


class _Literal(str):
    """Text :func:`value_text` writes as it is (brackets and separators)."""


_END = object()


def _list_parts(items: list) -> Iterator[Any]:
    for i, item in enumerate(items):
        if i:
            yield _Literal(", ")
        yield item
    yield _Literal("]")


def _dict_parts(items: dict) -> Iterator[Any]:
    for i, (key, item) in enumerate(items.items()):
        yield _Literal(f"{', ' if i else ''}{key!r}: ")
        yield item
    yield _Literal("}")


def _head(items: list | dict, n: int) -> list | dict:
    """The first ``n`` entries of ``items``."""
    if len(items) <= n:
        return items
    return items[:n] if isinstance(items, list) else dict(itertools.islice(items.items(), n))


def _holds_containers(items: list | dict) -> bool:
    return any(isinstance(v, (list, dict)) for v in (items if isinstance(items, list) else items.values()))


#: values nested at most this deep go to ``repr`` itself (far below the recursion limit, whatever the caller's stack)
_SHALLOW = 100


def _shallow(value: Any) -> bool:
    """Whether ``value`` holds no list or object nested more than :data:`_SHALLOW` levels deep."""
    level = [value] if isinstance(value, (list, dict)) else []
    for _ in range(_SHALLOW):
        if not level:
            return True
        level = [v for c in level for v in (c if isinstance(c, list) else c.values()) if isinstance(v, (list, dict))]
    return not level


def value_text(value: Any, limit: int | None = None) -> str:
    """``repr(value)`` of a decoded JSON value, built without recursion: ``repr`` and ``str`` raise RecursionError
    on lists nested about 1,000 deep, which the JSON readers accept (up to 1,024 levels). With ``limit``, only the
    first ``limit + 1`` characters (a longer text is then known to be cut), so a huge value costs nothing."""
    if limit is None and _shallow(value):
        return repr(value)
    out: list[str] = []
    size = 0
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack and (limit is None or size <= limit):
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        if isinstance(item, _Literal):
            text = item
        elif isinstance(item, (list, dict)):
            if limit is not None:  # each entry takes a character: the rest cannot reach the text kept
                item = _head(item, limit - size + 1)
            if _holds_containers(item):
                text = "[" if isinstance(item, list) else "{"
                stack.append(_list_parts(item) if isinstance(item, list) else _dict_parts(item))
            else:  # entries are leaves: repr goes one level deep
                text = repr(item)
        else:
            text = repr(item)
        out.append(text)
        size += len(text)
    return "".join(out) if limit is None else "".join(out)[: limit + 1]


def flat(value: Any) -> Any:
    """``value``, a list or object as its :func:`value_text` (what ``str`` would give, without recursion)."""
    return value_text(value) if isinstance(value, (list, dict)) else value


def _show(value: Any) -> str:
    text = value_text(value, 40)
    return text if len(text) <= 40 else text[:39] + "…"


def checked_int(column: str, value: int) -> int:
    """``value`` if it fits ``column`` (see :data:`INT_RANGES`), else :class:`OutOfRange`."""
    lo, hi = INT_RANGES.get(column, _INT64)
    if not lo <= value <= hi:
        raise OutOfRange(f"'{KEYS.get(column, column)}' {_show(value)} is out of range ({lo}..{hi})")
    return value


def checked_ints(column: str, values: np.ndarray, absent: int | None = None) -> np.ndarray:
    """``values`` (int64) cast to ``column``'s dtype after checking their range (``absent`` always passes)."""
    lo, hi = INT_RANGES.get(column, _INT64)
    bad = (values < lo) | (values > hi)
    if absent is not None:
        bad &= values != absent
    if bad.any():
        checked_int(column, int(values[np.flatnonzero(bad)[0]]))
    return values


def checked_ns(key: str, us: float | None, label: str) -> int:
    """Microseconds from a trace as integer nanoseconds; ``None`` (missing) gives :data:`MISSING`."""
    if us is None:
        return MISSING
    ns = us * 1000.0
    limit = TS_LIMIT if key == "ts" else DUR_LIMIT
    lo = 0 if key == "ts" else -DUR_LIMIT
    if not (math.isfinite(ns) and lo <= ns < limit):
        raise OutOfRange(f"'{key}' {_show(us)} µs of event {_show(label)} is out of range")
    return round(ns)


def checked_ns_array(key: str, us: np.ndarray, labels: list[str]) -> np.ndarray:
    """:func:`checked_ns` of every value (NaN: missing)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ns = us * 1000.0
        missing = np.isnan(ns)
        limit = TS_LIMIT if key == "ts" else DUR_LIMIT
        lo = 0 if key == "ts" else -DUR_LIMIT
        bad = ~missing & ~((ns >= lo) & (ns < limit))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        checked_ns(key, float(us[i]), labels[i])
    return np.where(missing, MISSING, np.rint(np.where(missing, 0.0, ns))).astype(np.int64)


# ------------------------------------------------------------------------------------------------ metadata
def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _int_field(where: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OutOfRange(f"metadata '{where}' is {_kind(value)} ({_show(value)}), expected an integer")
    if not lo <= value <= hi:
        raise OutOfRange(f"metadata '{where}' {_show(value)} is out of range ({lo}..{hi})")


def _str_field(where: str, value: Any) -> None:
    if not isinstance(value, str):
        raise OutOfRange(f"metadata '{where}' is {_kind(value)} ({_show(value)}), expected a string")


def _object(where: str, value: Any, ints: dict[str, tuple[int, int]], strings: tuple[str, ...]) -> None:
    if not isinstance(value, dict):
        raise OutOfRange(f"metadata '{where}' is {_kind(value)}, expected an object")
    for key, (lo, hi) in ints.items():
        if value.get(key) is not None:
            _int_field(f"{where}.{key}", value[key], lo, hi)
    for key in strings:
        if value.get(key) is not None:
            _str_field(f"{where}.{key}", value[key])


_RANK = (0, 2**31 - 1)
_DEVICE_INTS = {"id": (0, 2**15 - 1), "numSms": (0, 2**31 - 1), "totalGlobalMem": (0, 2**62),
                "computeMajor": (0, 2**31 - 1), "computeMinor": (0, 2**31 - 1)}


def check_metadata(metadata: dict[str, Any]) -> None:
    """:class:`OutOfRange` for metadata the analysis reads that has the wrong type or range."""
    from lightning_streamprof.names import TRACE_METADATA_KEY

    if metadata.get("distributedInfo") is not None:
        _object("distributedInfo", metadata["distributedInfo"], {"rank": _RANK, "world_size": (1, 2**31 - 1)},
                ("backend",))
    props = metadata.get("deviceProperties")
    if props is not None:
        if not isinstance(props, list):
            raise OutOfRange(f"metadata 'deviceProperties' is {_kind(props)}, expected a list")
        for i, p in enumerate(props):
            _object(f"deviceProperties[{i}]", p, _DEVICE_INTS, ("name",))
    ours = metadata.get(TRACE_METADATA_KEY)
    if ours is not None:
        _object(TRACE_METADATA_KEY, ours, {"window": _RANK, "first_step": (0, 2**62), "steps": _RANK},
                ("run", "host"))


# ------------------------------------------------------------------------------------------------ clean
def _identity_hash(table: EventTable) -> np.ndarray:
    """A 64-bit hash of each event's columns (equal events hash alike)."""
    h = np.zeros(len(table), np.uint64)
    with np.errstate(over="ignore"):
        for name, _, _ in COLUMNS:
            col = getattr(table, name)
            bits = col.view(np.uint32).astype(np.uint64) if col.dtype == np.float32 else col.astype(np.uint64)
            h = (h ^ bits) * np.uint64(0x100000001B3) + np.uint64(0x9E3779B97F4A7C15)
    return h


def _duplicates(table: EventTable) -> np.ndarray:
    """Mask of events that repeat an earlier event exactly (every column equal)."""
    n = len(table)
    out = np.zeros(n, bool)
    if n < 2:
        return out
    h = _identity_hash(table)
    order = np.argsort(h, kind="stable")
    same = np.flatnonzero(h[order][1:] == h[order][:-1])
    first, second = order[same], order[same + 1]  # equal hashes, in the order of the events
    equal = np.ones(same.size, bool)
    for name, _, _ in COLUMNS:  # confirm on the columns (hash collisions are kept)
        col = getattr(table, name)
        a, b = col[first], col[second]
        equal &= (a == b) | (np.isnan(a) & np.isnan(b)) if col.dtype.kind == "f" else a == b
    out[second[equal]] = True
    return out


def take(table: EventTable, keep: np.ndarray, **changes: Any) -> EventTable:
    """``table`` with only the rows where ``keep`` is true (and ``changes`` to its fields); the collective
    arguments of the rows kept follow them to their new row numbers."""
    cols = {name: getattr(table, name)[keep] for name, _, _ in COLUMNS}
    if table.comm_args and "comm_args" not in changes:
        new_row = np.cumsum(keep) - 1
        changes["comm_args"] = {int(new_row[row]): args for row, args in table.comm_args.items() if keep[row]}
    return dataclasses.replace(table, **cols, **changes)


def clean(table: EventTable) -> EventTable:
    """``table`` without the values that cannot be true; ``warnings`` says what was ignored."""
    notes: list[str] = list(table.warnings)
    drop = np.zeros(len(table), bool)
    for mask, what in (
        (table.ts == MISSING, "without 'ts'"),
        (table.dur == MISSING, "of phase 'X' without 'dur'"),
        ((table.dur < 0) & (table.dur != MISSING), "with a negative 'dur'"),
    ):
        if mask.any():
            notes.append(f"ignored {int(mask.sum())} event(s) {what}")
            drop |= mask
    if drop.any():
        table = take(table, ~drop)
    dup = _duplicates(table)
    if dup.any():
        notes.append(f"ignored {int(dup.sum())} duplicated event(s) (every field equal to an earlier event)")
        table = take(table, ~dup)
    kernels = table.kind == Kind.KERNEL
    occ = table.occupancy
    bad = kernels & ~np.isnan(occ) & ((occ < 0) | (occ > 1) | ~np.isfinite(occ))
    if bad.any():
        notes.append(f"ignored 'est. achieved occupancy %' of {int(bad.sum())} kernel(s): outside 0..100")
        occ[bad] = np.nan
    blocks = table.blocks_per_sm
    bad = ~np.isnan(blocks) & ((blocks < 0) | ~np.isfinite(blocks))
    if bad.any():
        notes.append(f"ignored 'blocks per SM' of {int(bad.sum())} kernel(s): negative or infinite")
        blocks[bad] = np.nan
    memory = table.kind == Kind.MEMORY
    for column, key in (("total_allocated", "Total Allocated"), ("total_reserved", "Total Reserved")):
        values = getattr(table, column)
        bad = memory & (values < -1)
        if bad.any():
            notes.append(f"ignored negative '{key}' of {int(bad.sum())} memory event(s)")
            values[bad] = -1
    return dataclasses.replace(table, warnings=tuple(notes)) if notes != list(table.warnings) else table
