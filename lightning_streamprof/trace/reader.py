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


@dataclass(frozen=True)
class EventTable:
    """Columnar Kineto events. Times are integer nanoseconds; ids are -1 where absent.

    ``name`` indexes ``names``; ``pid``/``tid`` are Kineto's (for device events: device and stream).
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
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def select(self, kind: Kind) -> np.ndarray:
        return np.flatnonzero(self.kind == kind)


def _as_int(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return -1
    return -1


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
    names: dict[str, int] = {}
    n = len(events)
    kind = np.zeros(n, np.int8)
    name = np.zeros(n, np.int32)
    ts = np.zeros(n, np.int64)
    dur = np.zeros(n, np.int64)
    pid = np.full(n, -1, np.int64)
    tid = np.full(n, -1, np.int64)
    ext = np.full(n, -1, np.int64)
    corr = np.full(n, -1, np.int64)
    row = 0
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") == "M":
            continue
        cat = ev.get("cat")
        kind[row] = _CATEGORIES.get(cat.lower(), Kind.OTHER) if isinstance(cat, str) else Kind.OTHER
        label = ev.get("name", "")
        name[row] = names.setdefault(label if isinstance(label, str) else str(label), len(names))
        ts[row] = round(float(ev.get("ts", 0)) * 1000)
        dur[row] = round(float(ev.get("dur", 0)) * 1000)
        pid[row] = _as_int(ev.get("pid"))
        tid[row] = _as_int(ev.get("tid"))
        args = ev.get("args")
        if isinstance(args, dict):
            ext[row] = _as_int(args.get("External id", -1))
            corr[row] = _as_int(args.get("correlation", -1))
        row += 1
    metadata = {k: v for k, v in doc.items() if k != "traceEvents"}
    return EventTable(
        source=source,
        names=tuple(names),
        kind=kind[:row],
        name=name[:row],
        ts=ts[:row],
        dur=dur[:row],
        pid=pid[:row],
        tid=tid[:row],
        external_id=ext[:row],
        correlation=corr[:row],
        metadata=metadata,
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
