"""Kineto JSON -> :class:`EventTable` (numpy columns), with one clear error for anything else.

Traces are read in chunks of events decoded by typed msgspec structs, so memory stays near the size of the
table rather than of the document. Anything the chunked reader does not recognise (another layout, odd value
types, broken data) is read again by :func:`parse_document`, which handles any JSON and words the errors.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import fsspec
import numpy as np
import orjson

from lightning_streamprof.names import MEMORY_EVENT
from lightning_streamprof.trace import blocks, collectives
from lightning_streamprof.trace.chunked import read_chunked
from lightning_streamprof.trace.table import CATEGORIES, COLUMNS, EventTable, Kind, TraceFormatError

__all__ = ["COLUMNS", "EventTable", "Kind", "TraceFormatError", "parse_document", "parse_trace", "read_trace"]

_CATEGORIES = CATEGORIES


def _as_int(value: Any, default: int = -1) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def _as_float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else np.nan


def _decompress(raw: bytes, source: str) -> bytes:
    if raw[:2] != blocks.GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as err:
        raise TraceFormatError(source, f"corrupt or truncated gzip data ({err})") from None


def parse_document(raw: bytes, source: str = "<bytes>") -> EventTable:
    """Parse a whole trace document at once (any valid JSON layout); the reference for the chunked reader."""
    data = _decompress(raw, source)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        reason = "truncated JSON" if "unexpected end" in str(err).lower() else f"invalid JSON ({err})"
        raise TraceFormatError(source, reason) from None
    del data
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceFormatError(source, "not a Kineto trace (no 'traceEvents' list)")
    events = doc["traceEvents"]
    strings: dict[str, int] = {}
    n = len(events)
    cols = {name: np.full(n, fill, dtype) for name, dtype, fill in COLUMNS}
    kind, name, ts, dur = cols["kind"], cols["name"], cols["ts"], cols["dur"]
    comm_args: dict[int, collectives.CommArgs] = {}
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
        name[row] = strings.setdefault(label if isinstance(label, str) else str(label), len(strings))
        try:
            ts[row] = round(float(ev.get("ts", 0)) * 1000)
            dur[row] = round(float(ev.get("dur", 0)) * 1000)
        except (TypeError, ValueError):
            raise TraceFormatError(source, f"event {row} has a non-numeric 'ts' or 'dur'") from None
        cols["pid"][row] = _as_int(ev.get("pid"))
        cols["tid"][row] = _as_int(ev.get("tid"))
        args = ev.get("args")
        if isinstance(args, dict):
            if "Collective name" in args:
                comm_args[row] = collectives.from_values(args)
            elif k in (Kind.USER_ANNOTATION, Kind.CPU_OP) and isinstance(label, str) and collectives.is_gloo_range(label):
                found = collectives.gloo_args(args.get("Input Dims"), args.get("Input type"))
                if found is not None:
                    comm_args[row] = found
            cols["external_id"][row] = _as_int(args.get("External id", args.get("external id")))
            cols["correlation"][row] = _as_int(args.get("correlation"))
            if k == Kind.MEMORY:
                dtype = _as_int(args.get("Device Type"))
                cols["device_type"][row] = dtype
                cols["device"][row] = _as_int(args.get("Device Id")) if dtype == 1 else -1
                cols["bytes"][row] = _as_int(args.get("Bytes"), 0)
                cols["total_allocated"][row] = _as_int(args.get("Total Allocated"))
                cols["total_reserved"][row] = _as_int(args.get("Total Reserved"))
                cols["addr"][row] = _as_int(args.get("Addr"))
            elif k in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_USER_ANNOTATION):
                cols["device"][row] = _as_int(args.get("device"), _as_int(ev.get("pid")))
                cols["stream"][row] = _as_int(args.get("stream"), _as_int(ev.get("tid")))
                cols["bytes"][row] = _as_int(args.get("bytes"), 0)
                if k == Kind.KERNEL:
                    cols["blocks_per_sm"][row] = _as_float(args.get("blocks per SM"))
                    cols["occupancy"][row] = _as_float(args.get("est. achieved occupancy %")) / 100.0
            elif k == Kind.PYTHON_FUNCTION:
                cols["python_id"][row] = _as_int(args.get("Python id"))
                cols["python_parent_id"][row] = _as_int(args.get("Python parent id"))
            elif k == Kind.CPU_OP:
                dims = args.get("Input Dims")
                if dims is not None:
                    cols["shapes"][row] = strings.setdefault(orjson.dumps(dims).decode(), len(strings))
        row += 1
    metadata = {key: value for key, value in doc.items() if key != "traceEvents"}
    return EventTable(
        source=source,
        names=tuple(strings),
        metadata=metadata,
        comm_args=comm_args,
        **{key: col[:row] for key, col in cols.items()},
    )


def parse_trace(raw: bytes, source: str = "<bytes>") -> EventTable:
    """Parse the bytes of a Kineto trace (plain or gzipped JSON)."""
    table = read_chunked(blocks.memory_pieces(raw, blocks.READ_SIZE), source) if raw else None
    return table if table is not None else parse_document(raw, source)


def read_trace(path: str) -> EventTable:
    """Read a Kineto trace from a local path or fsspec URL (``.json`` or ``.json.gz``)."""
    source = str(path)
    try:
        with fsspec.open(source, "rb") as f:
            first = f.read(blocks.READ_SIZE)
            if not first:
                raise TraceFormatError(source, "empty file")
            table = read_chunked(blocks.file_pieces(f.read, first, blocks.READ_SIZE), source)
        if table is not None:
            return table
        with fsspec.open(source, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise TraceFormatError(source, "no such file") from None
    except OSError as err:
        raise TraceFormatError(source, f"cannot be read ({err})") from None
    if not raw:
        raise TraceFormatError(source, "empty file")
    return parse_document(raw, source=source)
