"""The columnar event table a Kineto trace is read into, its event kinds and its error type."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class TraceFormatError(ValueError):
    """A file that is not a readable Kineto trace; the message names the file and the reason."""

    def __init__(self, source: str, reason: str) -> None:
        from lightning_streamprof.escape import one_line

        super().__init__(f"{one_line(str(source))}: {one_line(str(reason))}")
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
    TRACE = 12


CATEGORIES: dict[str, "Kind"] = {
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
    "trace": Kind.TRACE,
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
    - ``comm_args``: row -> the collective arguments of the few events that carry them
      (:class:`~lightning_streamprof.trace.collectives.CommArgs`).
    - ``warnings``: what the reader ignored because it cannot be true (negative durations, duplicates...).
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
    comm_args: dict[int, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def select(self, *kinds: Kind) -> np.ndarray:
        """Row indices of the events of the given kinds."""
        return np.flatnonzero(np.isin(self.kind, kinds)) if len(kinds) > 1 else np.flatnonzero(self.kind == kinds[0])
