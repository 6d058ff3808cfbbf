"""Kineto JSON -> :class:`EventTable` (numpy columns), with one clear error for anything else.

Traces are read in chunks of events decoded by typed msgspec structs, so memory stays near the size of the
table rather than of the document. Anything the chunked reader does not recognise (another layout, odd value
types, broken data) is read again by :func:`parse_document`, which handles any JSON and words the errors.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from lightning_streamprof.names import MEMORY_EVENT
from lightning_streamprof.trace import blocks, collectives, remote
from lightning_streamprof.trace.checks import (OutOfRange, check_metadata, checked_int, checked_ns, clean, flat,
                                               value_text)
from lightning_streamprof.trace.chunked import read_chunked
from lightning_streamprof.trace.columns import dims_text
from lightning_streamprof.trace.limits import (InflateLimit, count_values, describe_limit, describe_values,
                                               inflate_limit, value_limit)
from lightning_streamprof.trace.table import CATEGORIES, COLUMNS, EventTable, Kind, TraceFormatError

__all__ = ["COLUMNS", "EventTable", "Kind", "TraceFormatError", "parse_document", "parse_trace", "read_trace"]

_CATEGORIES = CATEGORIES


def _as_int(value: Any, default: int = -1) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def _as_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return math.inf
    return np.nan


def _microseconds(value: Any) -> float | None:
    """A ``ts``/``dur`` value as a number of microseconds (None: missing); ValueError if it is not a number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(value)
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _decompress(raw: bytes, source: str) -> bytes | bytearray:
    if raw[:2] != blocks.GZIP_MAGIC:
        return raw
    try:
        return blocks.gunzip_all(raw, inflate_limit(len(raw)))
    except blocks.BadGzip as err:
        raise TraceFormatError(source, f"corrupt or truncated gzip data ({err})") from None
    except InflateLimit as err:
        raise TraceFormatError(source, describe_limit(err.limit, len(raw))) from None


def parse_document(raw: bytes, source: str = "<bytes>") -> EventTable:
    """Parse a whole trace document at once (any valid JSON layout); the reference for the chunked reader.
    A gzipped document may inflate to :func:`~lightning_streamprof.trace.limits.inflate_limit` bytes, and any may
    hold :func:`~lightning_streamprof.trace.limits.value_limit` values (counted before they are decoded)."""
    data = _decompress(raw, source)
    if count_values(data) > (values := value_limit(len(raw))):
        raise TraceFormatError(source, describe_values(values, len(raw)))
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        reason = "truncated JSON" if "unexpected end" in str(err).lower() else f"invalid JSON ({err})"
        raise TraceFormatError(source, reason) from None
    del data
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceFormatError(source, "not a Kineto trace (no 'traceEvents' list)")
    events = [ev for ev in doc["traceEvents"] if isinstance(ev, dict)]  # rows for events only
    strings: dict[str, int] = {}
    n = len(events)
    cols = {name: np.full(n, fill, dtype) for name, dtype, fill in COLUMNS}
    comm_args: dict[int, collectives.CommArgs] = {}
    row = 0
    try:
        row = _fill(events, cols, strings, comm_args, source)
    except OutOfRange as err:
        raise TraceFormatError(source, str(err)) from None
    metadata = {key: value for key, value in doc.items() if key != "traceEvents"}
    return EventTable(
        source=source,
        names=tuple(strings),
        metadata=metadata,
        comm_args=comm_args,
        **{key: col[:row] for key, col in cols.items()},
    )


def _fill(events: list, cols: dict[str, np.ndarray], strings: dict[str, int],
          comm_args: dict[int, collectives.CommArgs], source: str) -> int:
    """Fill ``cols`` (and ``comm_args``) from the event dicts; returns the number of rows (:class:`OutOfRange`
    for a bad number)."""
    kind, name, ts, dur = cols["kind"], cols["name"], cols["ts"], cols["dur"]
    row = 0
    for ev in events:
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        if ph == "M" or ph == "s" or ph == "f":
            continue
        cat = ev.get("cat")
        k = _CATEGORIES.get(cat.lower(), Kind.OTHER) if isinstance(cat, str) else Kind.OTHER
        if k == Kind.FLOW:
            continue
        label = ev.get("name", "")
        if k == Kind.OTHER and not cat and label == MEMORY_EVENT:  # older traces: [memory] events without a cat
            k = Kind.MEMORY
        kind[row] = k
        label = label if isinstance(label, str) else value_text(label)
        name[row] = strings.setdefault(label, len(strings))
        try:
            ts_us = _microseconds(ev.get("ts"))
            dur_us = _microseconds(ev.get("dur", None if ph == "X" else 0))
        except ValueError:
            raise TraceFormatError(source, f"event {row} has a non-numeric 'ts' or 'dur'") from None
        ts[row] = checked_ns("ts", ts_us, label)
        dur[row] = checked_ns("dur", dur_us, label)

        def put(column: str, value: Any, default: int = -1) -> None:
            cols[column][row] = checked_int(column, _as_int(value, default))

        put("pid", ev.get("pid"))
        put("tid", ev.get("tid"))
        args = ev.get("args")
        if isinstance(args, dict):
            if "Collective name" in args:
                comm_args[row] = collectives.from_values({key: flat(args.get(key)) for key in collectives.KEYS})
            elif k in (Kind.USER_ANNOTATION, Kind.CPU_OP) and collectives.is_gloo_range(label):
                found = collectives.gloo_args(args.get("Input Dims"), args.get("Input type"))
                if found is not None:
                    comm_args[row] = found
            put("external_id", args.get("External id", args.get("external id")))
            put("correlation", args.get("correlation"))
            if k == Kind.MEMORY:
                dtype = checked_int("device_type", _as_int(args.get("Device Type")))
                cols["device_type"][row] = dtype
                put("device", args.get("Device Id") if dtype == 1 else -1)
                put("bytes", args.get("Bytes"), 0)
                put("total_allocated", args.get("Total Allocated"))
                put("total_reserved", args.get("Total Reserved"))
                put("addr", args.get("Addr"))
            elif k in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_USER_ANNOTATION):
                put("device", _as_int(args.get("device"), _as_int(ev.get("pid"))))
                put("stream", _as_int(args.get("stream"), _as_int(ev.get("tid"))))
                put("bytes", args.get("bytes"), 0)
                if k == Kind.KERNEL:
                    cols["blocks_per_sm"][row] = _as_float(args.get("blocks per SM"))
                    cols["occupancy"][row] = _as_float(args.get("est. achieved occupancy %")) / 100.0
            elif k == Kind.PYTHON_FUNCTION:
                put("python_id", args.get("Python id"))
                put("python_parent_id", args.get("Python parent id"))
            elif k == Kind.CPU_OP:
                dims = args.get("Input Dims")
                if dims is not None:
                    cols["shapes"][row] = strings.setdefault(dims_text(dims), len(strings))
        row += 1
    return row


def checked(table: EventTable) -> EventTable:
    """The table with its metadata checked and the values that cannot be true left out (see
    :mod:`lightning_streamprof.trace.checks`); :class:`TraceFormatError` for a trace with nothing to analyse."""
    source = table.source
    try:
        check_metadata(table.metadata)
    except OutOfRange as err:
        raise TraceFormatError(source, str(err)) from None
    if len(table) == 0:
        raise TraceFormatError(source, "no events ('traceEvents' holds none)")
    table = clean(table)
    if len(table) == 0:
        raise TraceFormatError(source, f"no usable events ({'; '.join(table.warnings)})")
    return table


def parse_trace(raw: bytes, source: str = "<bytes>") -> EventTable:
    """Parse and check the bytes of a Kineto trace (plain or gzipped JSON)."""
    if not raw:
        raise TraceFormatError(source, "empty file")
    table = read_chunked(blocks.memory_pieces(raw, blocks.READ_SIZE), source, limit=inflate_limit(len(raw)),
                         size=len(raw), values=value_limit(len(raw)))
    return checked(table if table is not None else parse_document(raw, source))


def read_trace(path: str) -> EventTable:
    """Read and check a Kineto trace from a local path or fsspec URL (``.json`` or ``.json.gz``).

    Only a regular file is opened (a FIFO, a device or a socket is refused at once), no more than its size when
    opened is read, a gzipped trace may inflate to :func:`~lightning_streamprof.trace.limits.inflate_limit`
    bytes, and any may hold :func:`~lightning_streamprof.trace.limits.value_limit` values; :class:`TraceFormatError`
    names the file and the limit otherwise (or says that memory ran out).
    """
    source = str(path)
    size = None
    try:
        with remote.opened(source) as f:
            size = f.size
            first = f.read(blocks.READ_SIZE)
            if not first:
                raise TraceFormatError(source, "empty file")
            table = read_chunked(blocks.file_pieces(f.read, first, blocks.READ_SIZE), source,
                                 limit=inflate_limit(size), size=size, values=value_limit(size))
        if table is None:
            with remote.opened(source) as f:
                table = parse_document(f.read(), source=source)
        return checked(table)
    except MemoryError:  # within the limits, yet more than this machine has
        of = f" ({size} bytes)" if size is not None else ""
        raise TraceFormatError(source, f"not enough memory to read it{of}") from None
