"""Decode chunks of Kineto events with typed msgspec structs and collect them as :class:`EventTable` columns."""

from __future__ import annotations

import mmap
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import orjson

from lightning_streamprof.names import MEMORY_EVENT
from lightning_streamprof.trace import collectives
from lightning_streamprof.trace.checks import checked_ints, checked_ns_array, flat, value_text
from lightning_streamprof.trace.table import CATEGORIES, COLUMNS, EventTable, Kind

#: stands for an absent ``device``/``stream`` argument (Kineto then means the event's pid/tid)
_ABSENT = -(2**63)
_NAN = float("nan")
_DROPPED_PH = frozenset({"M", "s", "f"})
_GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_USER_ANNOTATION)
#: kinds that carry an External id (``external id`` in older traces)
_LINKED_KINDS = (*_GPU_KINDS, Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.RUNTIME, Kind.DRIVER)


class Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` of an event: only the keys the table keeps."""

    external_id: int | None = msgspec.field(default=-1, name="External id")
    external_id_lower: int | None = msgspec.field(default=-1, name="external id")  # older traces
    correlation: int | None = -1
    device: int | None = _ABSENT
    stream: int | None = _ABSENT
    bytes: int | None = 0
    blocks_per_sm: float | None = msgspec.field(default=_NAN, name="blocks per SM")
    occupancy: float | None = msgspec.field(default=_NAN, name="est. achieved occupancy %")
    device_type: int | None = msgspec.field(default=-1, name="Device Type")
    device_id: int | None = msgspec.field(default=-1, name="Device Id")
    mem_bytes: int | None = msgspec.field(default=0, name="Bytes")
    total_allocated: int | None = msgspec.field(default=-1, name="Total Allocated")
    total_reserved: int | None = msgspec.field(default=-1, name="Total Reserved")
    addr: int | None = msgspec.field(default=-1, name="Addr")
    python_id: int | None = msgspec.field(default=-1, name="Python id")
    python_parent_id: int | None = msgspec.field(default=-1, name="Python parent id")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    # collectives (kept raw: decoded only for the few events that carry them)
    coll_name: msgspec.Raw | None = msgspec.field(default=None, name="Collective name")
    coll_seq: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Seq")
    coll_group: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Process Group Name")
    coll_in: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="In msg nelems")
    coll_out: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Out msg nelems")
    coll_dtype: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="dtype")
    coll_size: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Group size")


NO_ARGS = Args()


_DEFAULTS: dict[str, Any] = {name: getattr(NO_ARGS, name) for name in Args.__struct_fields__}
_DEFAULTS.update(ts=None, dur=None)
_COLL_FIELDS = (("Collective name", "coll_name"), ("Seq", "coll_seq"), ("Process Group Name", "coll_group"),
                ("In msg nelems", "coll_in"), ("Out msg nelems", "coll_out"), ("dtype", "coll_dtype"),
                ("Group size", "coll_size"))


class Event(msgspec.Struct, gc=False):
    """One ``traceEvents`` entry: only the keys the table keeps."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = _NAN
    dur: float = _NAN
    pid: int | str | None = -1
    tid: int | str | None = -1
    args: Args = NO_ARGS


DECODER = msgspec.json.Decoder(list[Event])


def dims_text(dims: Any) -> str:
    """``Input Dims`` as text: compact JSON, else (nested past orjson's 255 levels, integers beyond 64 bits) its
    :func:`~lightning_streamprof.trace.checks.value_text`."""
    try:
        return orjson.dumps(dims).decode()
    except TypeError:
        return value_text(dims)


class _KindOf(dict):
    def __missing__(self, cat: str) -> int:
        kind = int(CATEGORIES.get(cat.lower(), Kind.OTHER))
        self[cat] = kind
        return kind


def _as_int(value: Any) -> int:
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


class _IntOf(dict):
    """``_as_int`` of each pid/tid value, cached (a trace has few distinct ones)."""

    def __missing__(self, value: Any) -> int:
        out = self[value] = _as_int(value)
        return out


def _field(items: list, name: str, dtype: Any) -> np.ndarray:
    """One attribute of every item; ``null`` values read as the field's default."""
    try:
        return np.fromiter(map(attrgetter(name), items), dtype=dtype, count=len(items))
    except TypeError:
        default = _DEFAULTS[name]
        values = [default if v is None else v for v in map(attrgetter(name), items)]
        return np.fromiter(values, dtype=dtype, count=len(values))


#: a private anonymous map where the system has them (POSIX): a shared one is not grown by ``mremap`` (its pages
#: past the old end would fault with SIGBUS) and costs more per page
_PRIVATE = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}


class MappedColumn:
    """A column in a private anonymous memory map of its own. Growing numpy arrays in the heap leaves holes the
    size of every earlier capacity; a map grows by remapping (no copy where the system has ``mremap``, else into a
    new map, the old one returned at once), and its pages past the last row are never touched, so only the rows
    count in resident memory."""

    def __init__(self, dtype: Any, rows: int = 1 << 16) -> None:
        self.dtype = np.dtype(dtype)
        self.capacity = rows
        self._map = mmap.mmap(-1, rows * self.dtype.itemsize, **_PRIVATE)

    def rows(self, count: int) -> np.ndarray:
        """The first ``count`` rows, as an array on the map (which it keeps alive)."""
        return np.frombuffer(self._map, self.dtype, count=count)

    def grow(self, capacity: int, kept: int) -> None:
        """Room for ``capacity`` rows, the first ``kept`` kept."""
        size = capacity * self.dtype.itemsize
        try:
            if not _PRIVATE:
                raise OSError("a shared map does not grow by remapping")
            self._map.resize(size)
        except (OSError, SystemError, ValueError):
            new = mmap.mmap(-1, size, **_PRIVATE)
            np.frombuffer(new, self.dtype, count=kept)[:] = self.rows(kept)
            self._map.close()
            self._map = new
        self.capacity = capacity


class ColumnBuilder:
    """Turns decoded event chunks into table columns, interning names in order of first appearance."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self._cols = {name: MappedColumn(dtype) for name, dtype, _ in COLUMNS}
        self._rows = 0
        self._kind_of = _KindOf()
        self._int_of = _IntOf()
        self._dims: dict[bytes, str | None] = {}
        self.comm_args: dict[int, collectives.CommArgs] = {}
        self._comm_names: list[bool] = []  # per interned string: a gloo:/nccl: range name

    def add_json(self, chunk: bytes) -> None:
        """Decode one ``[event, ...]`` chunk (raises msgspec errors for anything unexpected) and add it."""
        self.add(DECODER.decode(chunk))

    def add(self, events: list[Event]) -> None:
        events = [ev for ev in events if ev.ph not in _DROPPED_PH]
        kind = np.fromiter(map(self._kind_of.__getitem__, [ev.cat for ev in events]), dtype=np.int8, count=len(events))
        flows = kind == Kind.FLOW
        if flows.any():
            events = [ev for ev, flow in zip(events, flows.tolist()) if not flow]
            kind = kind[~flows]
        for i in np.flatnonzero(kind == Kind.OTHER).tolist():  # older traces: [memory] events without a cat
            if not events[i].cat and events[i].name == MEMORY_EVENT:
                kind[i] = Kind.MEMORY
        n = len(events)
        cols = {name: np.full(n, fill, dtype) for name, dtype, fill in COLUMNS}
        cols["kind"] = kind
        labels = [ev.name for ev in events]
        cols["ts"] = checked_ns_array("ts", _field(events, "ts", np.float64), labels)
        dur = _field(events, "dur", np.float64)
        instant = np.isnan(dur) & np.fromiter((ev.ph != "X" for ev in events), bool, count=n)
        cols["dur"] = checked_ns_array("dur", np.where(instant, 0.0, dur), labels)
        int_of = self._int_of.__getitem__
        pid = cols["pid"] = np.fromiter(map(int_of, [ev.pid for ev in events]), dtype=np.int64, count=n)
        tid = cols["tid"] = np.fromiter(map(int_of, [ev.tid for ev in events]), dtype=np.int64, count=n)
        args = [ev.args for ev in events]
        external = cols["external_id"] = _field(args, "external_id", np.int64)
        missing = np.flatnonzero((external < 0) & np.isin(kind, _LINKED_KINDS))
        if missing.size:
            lower = _field([args[i] for i in missing.tolist()], "external_id_lower", np.int64)
            external[missing] = lower
        cols["correlation"] = _field(args, "correlation", np.int64)

        rows = np.flatnonzero(kind == Kind.MEMORY)
        if rows.size:
            sub = [args[i] for i in rows.tolist()]
            dtype = checked_ints("device_type", _field(sub, "device_type", np.int64))
            cols["device_type"][rows] = dtype
            cols["device"][rows] = checked_ints("device", np.where(dtype == 1, _field(sub, "device_id", np.int64), -1))
            for col, key in (("bytes", "mem_bytes"), ("total_allocated", "total_allocated"),
                             ("total_reserved", "total_reserved"), ("addr", "addr")):
                cols[col][rows] = _field(sub, key, np.int64)

        rows = np.flatnonzero(np.isin(kind, _GPU_KINDS))
        if rows.size:
            sub = [args[i] for i in rows.tolist()]
            has_args = np.fromiter((a is not NO_ARGS for a in sub), dtype=bool, count=len(sub))
            for col, key, default in (("device", "device", pid), ("stream", "stream", tid)):
                value = _field(sub, key, np.int64)
                value = np.where(value == _ABSENT, default[rows], value)
                cols[col][rows] = checked_ints(col, np.where(has_args, value, -1))
            cols["bytes"][rows] = _field(sub, "bytes", np.int64)
            kernels = np.flatnonzero(kind[rows] == Kind.KERNEL)
            if kernels.size:
                ksub = [sub[i] for i in kernels.tolist()]
                cols["blocks_per_sm"][rows[kernels]] = _field(ksub, "blocks_per_sm", np.float64)
                cols["occupancy"][rows[kernels]] = _field(ksub, "occupancy", np.float64) / 100.0

        python = kind == Kind.PYTHON_FUNCTION
        if python.any():
            for col in ("python_id", "python_parent_id"):
                cols[col] = np.where(python, _field(args, col, np.int64), -1)

        dims_at = self._shape_strings(kind, args)
        cols["name"], shapes = self._intern(labels, dims_at)
        self._collectives(cols["name"], kind, args)
        if shapes:
            cols["shapes"][list(shapes)] = list(shapes.values())
        self._append(cols, n)

    def _append(self, cols: dict[str, np.ndarray], n: int) -> None:
        start, end = self._rows, self._rows + n
        for name, col in cols.items():
            column = self._cols[name]
            if end > column.capacity:
                column.grow(max(end, 2 * column.capacity), start)
            column.rows(end)[start:] = col
        self._rows = end

    def _collectives(self, name: np.ndarray, kind: np.ndarray, args: list[Args]) -> None:
        """Keep the collective arguments of the events that carry them (see :mod:`.collectives`)."""
        base = self._rows
        for i, value in enumerate(map(attrgetter("coll_name"), args)):
            if value is not None:
                a = args[i]
                values = {key: flat(collectives.decode_raw(getattr(a, attr))) for key, attr in _COLL_FIELDS}
                self.comm_args[base + i] = collectives.from_values(values)
        strings = list(self.strings)
        self._comm_names.extend(collectives.is_gloo_range(n) for n in strings[len(self._comm_names):])
        flags = np.fromiter(self._comm_names, bool, len(self._comm_names))
        ranges = flags[name] & ((kind == Kind.USER_ANNOTATION) | (kind == Kind.CPU_OP)) if name.size else name.astype(bool)
        for i in np.flatnonzero(ranges).tolist():
            if base + i not in self.comm_args:
                found = collectives.gloo_args(collectives.decode_raw(args[i].input_dims),
                                              collectives.decode_raw(args[i].input_type))
                if found is not None:
                    self.comm_args[base + i] = found

    def _shape_strings(self, kind: np.ndarray, args: list[Args]) -> dict[int, str]:
        out = {}
        for row in np.flatnonzero(kind == Kind.CPU_OP).tolist():
            raw = args[row].input_dims
            if not raw:
                continue
            key = bytes(raw)
            text = self._dims.get(key, False)
            if text is False:
                dims = orjson.loads(key)
                text = self._dims[key] = None if dims is None else dims_text(dims)
            if text is not None:
                out[row] = text
        return out

    def _intern(self, labels: list[str], dims_at: dict[int, str]) -> tuple[np.ndarray, dict[int, int]]:
        strings = self.strings
        add = strings.setdefault
        index: list[int] = []
        shapes: dict[int, int] = {}
        start = 0
        for row, text in dims_at.items():
            index += [add(label, len(strings)) for label in labels[start : row + 1]]
            shapes[row] = add(text, len(strings))
            start = row + 1
        index += [add(label, len(strings)) for label in labels[start:]]
        return np.array(index, dtype=np.int32), shapes

    def finish(self, source: str, metadata: dict[str, Any]) -> EventTable:
        """The table of every event added so far."""
        columns = {name: col.rows(self._rows) for name, col in self._cols.items()}
        return EventTable(source=source, names=tuple(self.strings), metadata=metadata, comm_args=self.comm_args,
                          **columns)
