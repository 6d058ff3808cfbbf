"""Which run, window, rank and host a trace belongs to: from its metadata, else from the profiler's layout.

StreamProfiler writes ``<dirpath>/<run>/w<window>-step<first step>/rank<global rank>.<ns>.pt.trace.json.gz``
(``<run>`` is ``<stage>-<time>``) and records ``distributedInfo`` and a ``streamprof`` entry (run, window,
first step, host, and the way StreamPipeline ran the window's steps) in the trace. For other traces the run is the
directory that holds them.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

import msgspec

from lightning_streamprof.names import TRACE_METADATA_KEY
from lightning_streamprof.results import TraceIdentity, WindowWay
from lightning_streamprof.results.triggers import WindowTrigger

_WINDOW_DIR = re.compile(r"^w(\d+)-step(\d+)$")
_RANK_FILE = re.compile(r"^rank(\d+)\.")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def trace_identity(path: str, metadata: dict[str, Any], root: str | None = None) -> TraceIdentity:
    """The identity of the trace at ``path`` (``root``: the directory it was found under, for run names)."""
    ours = metadata.get(TRACE_METADATA_KEY) or {}
    info = metadata.get("distributedInfo") or {}
    parent, name = posixpath.split(str(path).replace("\\", "/"))
    grandparent, window_dir = posixpath.split(parent)
    layout = _WINDOW_DIR.match(window_dir)
    rank_match = _RANK_FILE.match(name)
    run = ours.get("run") if isinstance(ours, dict) else None
    if run is None:
        run_dir = grandparent if layout else parent
        run = _relative(run_dir, root)
    window = _int(ours.get("window")) if isinstance(ours, dict) else None
    first_step = _int(ours.get("first_step")) if isinstance(ours, dict) else None
    if layout:
        window = int(layout.group(1)) if window is None else window
        first_step = int(layout.group(2)) if first_step is None else first_step
    rank = _int(info.get("rank")) if isinstance(info, dict) else None
    if rank is None and rank_match:
        rank = int(rank_match.group(1))
    return TraceIdentity(
        path=str(path), run=run, window=window, first_step=first_step, rank=rank,
        world_size=_int(info.get("world_size")) if isinstance(info, dict) else None,
        host=_host(ours, metadata), pipeline=_pipeline(ours), trigger=_trigger(ours),
    )


#: the most ways, and the longest label, that a window's ``pipeline`` entry is read with
_WAYS, _LABEL = 16, 200


def _entry(ours: Any, key: str, kind: type) -> Any:
    """Our ``streamprof`` entry's ``key`` as a ``kind``, None when absent or not of its form (it is a note about the
    trace, never a reason to refuse it)."""
    value = ours.get(key) if isinstance(ours, dict) else None
    if not isinstance(value, dict):
        return None
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError:
        return None


def _pipeline(ours: Any) -> WindowWay | None:
    """Our ``streamprof`` entry's ``pipeline`` (the way StreamPipeline ran the window's steps), None when absent or
    not of its form."""
    way = _entry(ours, "pipeline", WindowWay)
    if way is None:
        return None
    labels = [way.first.way, way.first.mode, *way.ways]
    if len(way.ways) > _WAYS or any(len(label) > _LABEL for label in labels) or not 0 <= way.first.staged_calls < 2**31:
        return None
    return way


def _trigger(ours: Any) -> WindowTrigger | None:
    """Our ``streamprof`` entry's ``trigger`` (why a window off the schedule was recorded), None when absent or not of
    its form."""
    trigger = _entry(ours, "trigger", WindowTrigger)
    if trigger is None or len(trigger.reason) > _LABEL or len(trigger.via or "") > _LABEL:
        return None
    return trigger


def _host(ours: Any, metadata: dict[str, Any]) -> str | None:
    """Our ``streamprof`` entry's host, else Kineto's ``host_name``."""
    host = ours.get("host") if isinstance(ours, dict) else None
    host = host if isinstance(host, str) else metadata.get("host_name")
    return host if isinstance(host, str) else None


def _relative(directory: str, root: str | None) -> str:
    """``directory`` relative to ``root`` (``"."`` for the root itself); the directory's name without a root."""
    if root is None:
        return posixpath.basename(directory) or directory
    root = str(root).replace("\\", "/").rstrip("/")
    if directory == root:
        return "."
    if directory.startswith(root + "/"):
        return directory[len(root) + 1:]
    return posixpath.basename(directory) or directory
