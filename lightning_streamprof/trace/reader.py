"""Kineto JSON -> :class:`EventTable` (numpy columns), with one clear error for anything else."""

from __future__ import annotations

import enum
import gzip
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from lightning_streamprof.storage import read_bytes


class TraceFormatError(ValueError):
    """A file that is not a readable Kineto trace; the message names the file and the reason."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class Kind(enum.IntEnum):
    """Event kinds, from Kineto's ``cat`` field (torch 1.x capitalised names included)."""

    OTHER = 0
    CPU_OP = 1
    USER_ANNOTATION = 2
    GPU_USER_ANNOTATION = 3
    PYTHON_FUNCTION = 4
    RUNTIME = 5
    DRIVER = 6
    KERNEL = 7
    MEMCPY = 8
    MEMSET = 9
    MEMORY = 10
    FLOW = 11


_CATEGORIES = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "gpu_user_annotation": Kind.GPU_USER_ANNOTATION,
    "python_function": Kind.PYTHON_FUNCTION,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cpu_instant_event": Kind.MEMORY,
    "ac2g": Kind.FLOW,
    "fwdbwd": Kind.FLOW,
}


#: (column, dtype, fill) of every numeric column, in order
COLUMNS: tuple[tuple[str, Any, Any], ...] = (
    ("kind", np.int8, 0),
    ("name", np.int32, 0),
    ("ts", np.int64, 0),
    ("dur", np.int64, 0),
    ("pid", np.int64, -1),
    ("tid", np.int64, -1),
    ("external_id", np.int64, -1),
    ("correlation", np.int64, -1),
    ("device", np.int16, -1),
    ("stream", np.int32, -1),
    ("blocks_per_sm", np.float32, np.nan),
    ("occupancy", np.float32, np.nan),
    ("bytes", np.int64, 0),
    ("total_allocated", np.int64, -1),
    ("total_reserved", np.int64, -1),
    ("device_type", np.int8, -1),
    ("addr", np.int64, -1),
    ("python_id", np.int64, -1),
    ("python_parent_id", np.int64, -1),
    ("shapes", np.int32, -1),
)


@dataclass(frozen=True, eq=False)
class EventTable:
    """Columnar Kineto events (``"ph": "M"`` metadata events and flow arrows are left out).

    Times are integer nanoseconds since Kineto's epoch. Integer ids are -1 and floats NaN where absent.

    - ``kind``: :class:`Kind`; ``name``: index into ``names`` (``names`` also holds ``shapes`` strings).
    - ``pid``/``tid``: Kineto's (host process/thread; for device events the device and the stream).
    - ``external_id``: links an operator to the runtime calls and device activity it launched;
      ``correlation``: links a runtime call to its kernel/memcpy/memset.
    - ``device``/``stream``: of kernels, copies and sets; for ``[memory]`` events the device id when
      ``device_type`` is 1 (CUDA), -1 for host memory.
    - ``blocks_per_sm``, ``occupancy`` (fraction 0..1, from ``est. achieved occupancy %``): kernels only.
    - ``bytes``: memory events (negative = free), copies and sets; ``total_allocated``/``total_reserved``,
      ``addr``: memory events. ``python_id``/``python_parent_id``: ``with_stack`` frames.
    - ``shapes``: index into ``names`` of the operator's ``Input Dims`` as compact JSON, -1 if not recorded.
    - ``metadata``: every top-level key of the trace except ``traceEvents`` (``deviceProperties``,
      ``distributedInfo``, ...).
    """

    source: str
    names: tuple[str, ...]
    kind: np.ndarray
    name: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    external_id: np.ndarray
    correlation: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    blocks_per_sm: np.ndarray
    occupancy: np.ndarray
    bytes: np.ndarray
    total_allocated: np.ndarray
    total_reserved: np.ndarray
    device_type: np.ndarray
    addr: np.ndarray
    python_id: np.ndarray
    python_parent_id: np.ndarray
    shapes: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def select(self, *kinds: Kind) -> np.ndarray:
        """Row indices of the events of the given kinds."""
        return np.flatnonzero(np.isin(self.kind, kinds)) if len(kinds) > 1 else np.flatnonzero(self.kind == kinds[0])


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
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as err:
        raise TraceFormatError(source, f"corrupt or truncated gzip data ({err})") from None


def parse_trace(raw: bytes, source: str = "<bytes>") -> EventTable:
    """Parse the bytes of a Kineto trace (plain or gzipped JSON)."""
    data = _decompress(raw, source)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        reason = "truncated JSON" if "unexpected end" in str(err).lower() else f"invalid JSON ({err})"
        raise TraceFormatError(source, reason) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceFormatError(source, "not a Kineto trace (no 'traceEvents' list)")
    events = doc["traceEvents"]
    strings: dict[str, int] = {}
    n = len(events)
    cols = {name: np.full(n, fill, dtype) for name, dtype, fill in COLUMNS}
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
        kind[row] = k
        label = ev.get("name", "")
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
            cols["external_id"][row] = _as_int(args.get("External id"))
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
        **{key: col[:row] for key, col in cols.items()},
    )


def read_trace(path: str) -> EventTable:
    """Read a Kineto trace from a local path or fsspec URL (``.json`` or ``.json.gz``)."""
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        raise TraceFormatError(str(path), "no such file") from None
    except OSError as err:
        raise TraceFormatError(str(path), f"cannot be read ({err})") from None
    if not raw:
        raise TraceFormatError(str(path), "empty file")
    return parse_trace(raw, source=str(path))
