"""Operator time by source line: the innermost user-code Python frame around each operator (``with_stack``)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np

from lightning_streamprof.analysis._links import Nesting, group, thread_keys
from lightning_streamprof.analysis.operators import device_self_times, operator_nesting
from lightning_streamprof.trace.reader import EventTable, Kind

#: top-level packages whose frames are library code, not the user's
LIBRARY_PACKAGES: frozenset[str] = frozenset({
    "torch", "torchvision", "torchaudio", "torchmetrics", "lightning", "lightning_fabric", "pytorch_lightning",
    "lightning_utilities", "lightning_streamprof", "numpy", "typing_extensions", "triton", "tqdm", "fsspec",
    "importlib_metadata", "packaging", "pkg_resources", "setuptools", "_pytest", "pluggy", "kornia", "PIL",
})

_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<function>.+)$")


@dataclass(frozen=True)
class SourceLine:
    """Operator self time attributed to one user-code line. ``share`` is of all operators' self time."""

    file: str
    line: int
    function: str
    host_self_ns: int
    device_self_ns: int
    share: float

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


def is_user_frame(name: str) -> bool:
    """Whether a ``python_function`` name (``path/file.py(123): fn``) is user code."""
    match = _FRAME.match(name)
    if not match:
        return False
    path = match["file"].replace("\\", "/")
    if path.startswith("<") or "site-packages/" in path or "dist-packages/" in path:
        return False
    top = path.split("/", 1)[0]
    module = top[:-3] if top.endswith(".py") else top
    return module not in LIBRARY_PACKAGES and module not in sys.stdlib_module_names


def _user_frames(table: EventTable, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The user-code ``python_function`` rows, and for each of ``rows`` the index into them of the innermost
    one around it (-1: none)."""
    frames = table.select(Kind.PYTHON_FUNCTION)
    user = frames[np.fromiter((is_user_frame(n) for n in table.names), bool, len(table.names))[table.name[frames]]]
    if user.size == 0 or rows.size == 0:
        return user, np.full(rows.size, -1, np.int64)
    starts = table.ts[user]
    nesting = Nesting(starts, starts + table.dur[user], thread_keys(table, user))
    return user, nesting.enclosing(table.ts[rows], thread_keys(table, rows))


def user_frames_at(table: EventTable, rows: np.ndarray) -> list[str | None]:
    """The innermost user-code frame (``file:line``) around each event of ``rows``; ``None`` without one."""
    out: list[str | None] = [None] * rows.size
    user, owner = _user_frames(table, rows)
    for i, o in enumerate(owner.tolist()):
        if o >= 0:
            m = _FRAME.match(table.names[table.name[user[o]]])
            assert m is not None
            out[i] = f"{m['file']}:{m['line']}"
    return out


def source_lines(table: EventTable, limit: int = 20) -> list[SourceLine]:
    """The ``limit`` user-code lines with the most operator host + device self time (empty without stacks)."""
    if table.select(Kind.PYTHON_FUNCTION).size == 0:
        return []  # recorded without with_stack
    ops, op_nest = operator_nesting(table)
    user, owner = _user_frames(table, ops)
    if user.size == 0 or ops.size == 0:
        return []
    host_self = op_nest.self_lengths()
    dev_self = device_self_times(table, ops)
    grand = float(host_self.sum() + dev_self.sum())
    hit = owner >= 0
    codes, groups = group(table.name[user[owner[hit]]])
    host = np.bincount(groups, weights=host_self[hit], minlength=codes.size)
    dev = np.bincount(groups, weights=dev_self[hit], minlength=codes.size)
    out = []
    for g, code in enumerate(codes.tolist()):
        m = _FRAME.match(table.names[code])
        assert m is not None
        out.append(
            SourceLine(m["file"], int(m["line"]), m["function"], int(host[g]), int(dev[g]),
                       float((host[g] + dev[g]) / grand) if grand > 0 else 0.0)
        )
    out.sort(key=lambda s: (-(s.host_self_ns + s.device_self_ns), s.file, s.line))
    return out[:limit]
