"""PyTorch's memory snapshot (``torch.cuda.memory._dump_snapshot``) read without torch: the allocated and reserved
curve of each device and the live allocations at its peak, by the user's line that made them.

The snapshot is a pickled dict: ``segments`` (the allocator's segments at the dump, each with its ``device``,
``total_size`` and ``blocks`` of ``size``, ``state`` and ``frames``) and ``device_traces`` (per device, the history:
entries with ``action`` — ``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``,
``segment_map``, ``segment_unmap``, ``oom``... — ``addr``, ``size``, ``time_us`` and ``frames`` of ``filename``,
``line``, ``name``, innermost first). Memory is allocated from ``alloc`` to ``free_requested`` (as torch's counters
count it; to ``free_completed`` where no request was recorded), in the sizes asked for; reserved from
``segment_alloc``/``segment_map`` to ``segment_free``/``segment_unmap``; what was there before the history started is
the state at the dump less the history's net change. The file is unpickled with no class allowed (plain containers
only), so a snapshot from elsewhere cannot run code.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable, Sequence
from typing import Any

from lightning_streamprof.results.memory_snapshot import LiveAllocations, SnapshotMemory

#: points kept of each curve, and rows of the allocations at the peak
CURVE_POINTS = 2000
TOP_ALLOCATIONS = 20
#: the most bytes of a snapshot file read, and the end of its name beside a trace (``rank<R>.<suffix>``)
SNAPSHOT_LIMIT = 1 << 30
SNAPSHOT_SUFFIX = "memory_snapshot.pickle"
#: frames of these are not the user's line
_LIBRARY = ("/torch/", "/lightning/", "/pytorch_lightning/", "/lightning_streamprof/", "site-packages/",
            "dist-packages/", "<frozen", "/threading.py", "/contextlib.py")
_RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
#: where no frame says who allocated
BEFORE = "(allocated before the history started)"
NO_FRAMES = "(no Python frame recorded)"


class SnapshotError(ValueError):
    """A file that is not a memory snapshot (the message says why)."""


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotError(f"the snapshot holds an object of {module}.{name}; a memory snapshot holds plain data")


def load(data: bytes) -> dict[str, Any]:
    """The snapshot dict of a pickle's bytes (plain containers only)."""
    try:
        snapshot = _Plain(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a file that is not a snapshot
        raise SnapshotError(f"not a pickle: {err}") from None
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("device_traces"), list):
        raise SnapshotError("no 'device_traces' in it")
    return snapshot


def user_frame(frames: Any) -> tuple[str, str] | None:
    """``(file:line, function)`` of the innermost frame outside the libraries (else the innermost frame)."""
    if not isinstance(frames, list) or not frames:
        return None
    good = [f for f in frames if isinstance(f, dict) and isinstance(f.get("filename"), str)]
    if not good:
        return None
    mine = next((f for f in good if not any(p in f["filename"] for p in _LIBRARY)), good[0])
    return f"{mine['filename']}:{mine.get('line', '?')}", str(mine.get("name", ""))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _at_dump(snapshot: dict[str, Any], device: int) -> tuple[int, int]:
    """Allocated and reserved bytes of ``device`` at the dump, from its segments."""
    allocated = reserved = 0
    for seg in snapshot.get("segments") or []:
        if not isinstance(seg, dict) or _int(seg.get("device")) != device:
            continue
        reserved += _int(seg.get("total_size"))
        allocated += sum(_int(b.get("requested_size")) or _int(b.get("size")) for b in seg.get("blocks") or []
                         if isinstance(b, dict) and b.get("state") == "active_allocated")
    return allocated, reserved


def device_memory(snapshot: dict[str, Any], device: int, path: str = "", *, rank: int | None = None,
                  window: int | None = None, top: int = TOP_ALLOCATIONS) -> SnapshotMemory | None:
    """The curve and the peak of ``device``'s history (None when it has no entry)."""
    traces = snapshot["device_traces"]
    entries = [e for e in (traces[device] if device < len(traces) and isinstance(traces[device], list) else [])
               if isinstance(e, dict) and isinstance(e.get("action"), str)]
    if not entries:
        return None
    end_alloc, end_res = _at_dump(snapshot, device)
    deltas = _allocated_deltas(entries)
    net_res = sum(_RESERVED.get(e["action"], 0) * _int(e.get("size")) for e in entries)
    allocated, reserved = end_alloc - sum(deltas), end_res - net_res
    t0 = _int(entries[0].get("time_us"))
    curve = [(0, allocated, reserved)]
    peak, peak_i, at_peak = allocated, -1, curve[0]
    for i, (e, delta) in enumerate(zip(entries, deltas)):
        allocated += delta
        reserved += _RESERVED.get(e["action"], 0) * _int(e.get("size"))
        if delta or e["action"] in _RESERVED:
            curve.append((max(0, _int(e.get("time_us")) - t0), allocated, reserved))
            if allocated > peak:
                peak, peak_i, at_peak = allocated, i, curve[-1]
    return SnapshotMemory(path=path, device=device, curve=_thin(curve, at_peak), peak_allocated=peak,
                          peak_reserved=at_peak[2], peak_us=at_peak[0], at_peak=_live(entries, peak_i, peak, top),
                          entries=len(entries), rank=rank, window=window)


def _allocated_deltas(entries: Sequence[dict[str, Any]]) -> list[int]:
    """Each entry's change to the allocated bytes: its size at ``alloc``, less it at ``free_requested``, and at a
    ``free_completed`` of an allocation in the history whose request was not recorded."""
    live: dict[int, int] = {}  # addresses allocated in the history and not yet freed -> size
    out = []
    for e in entries:
        action, addr = e["action"], _int(e.get("addr"))
        if action == "alloc":
            live[addr] = _int(e.get("size"))
            out.append(live[addr])
        elif action == "free_requested":
            out.append(-(live.pop(addr, None) or _int(e.get("size"))))
        elif action == "free_completed" and addr in live:
            out.append(-live.pop(addr))
        else:
            out.append(0)
    return out


def _thin(curve: list[tuple[int, int, int]], keep: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """At most :data:`CURVE_POINTS` points, the first, the last and the peak among them."""
    if len(curve) <= CURVE_POINTS:
        return curve
    step = len(curve) / (CURVE_POINTS - 2)
    out = [curve[int(i * step)] for i in range(CURVE_POINTS - 2)] + [curve[-1]]
    return sorted({*out, keep}, key=lambda p: p[0])


def _live(entries: Sequence[dict[str, Any]], peak_i: int, peak: int, top: int) -> list[LiveAllocations]:
    """The allocations live after entry ``peak_i`` by the user's line, the bytes no history entry accounts for as
    one row (:data:`BEFORE`)."""
    live: dict[int, tuple[int, Any]] = {}
    for e in entries[:peak_i + 1]:
        if e["action"] == "alloc":
            live[_int(e.get("addr"))] = (_int(e.get("size")), e.get("frames"))
        elif e["action"] in ("free_requested", "free_completed"):
            live.pop(_int(e.get("addr")), None)
    before = peak - sum(size for size, _ in live.values())
    extra = [LiveAllocations(location=BEFORE, function="", bytes=before, count=0)] if before > 0 else []
    return _by_line(live.values(), top, extra)


def _by_line(allocations: Iterable[tuple[int, Any]], top: int,
             extra: Sequence[LiveAllocations] = ()) -> list[LiveAllocations]:
    """``(size, frames)`` allocations summed by the user's line (:data:`NO_FRAMES` where none was recorded), with
    ``extra`` rows, the ``top`` largest first."""
    rows: dict[tuple[str, str], list[int]] = {}
    for size, frames in allocations:
        row = rows.setdefault(user_frame(frames) or (NO_FRAMES, ""), [0, 0])
        row[0] += size
        row[1] += 1
    out = [LiveAllocations(location=loc, function=fn, bytes=b, count=n) for (loc, fn), (b, n) in rows.items()]
    return sorted([*out, *extra], key=lambda r: (-r.bytes, r.location))[:top]


def live_at_dump(snapshot: dict[str, Any], top: int = TOP_ALLOCATIONS) -> list[LiveAllocations]:
    """The allocations live at the dump (the segments' active blocks) by the user's line, largest first; the
    blocks with no frame (allocated before stacks were recorded) as one row (:data:`NO_FRAMES`)."""
    blocks = (b for seg in snapshot.get("segments") or [] if isinstance(seg, dict) for b in seg.get("blocks") or []
              if isinstance(b, dict) and str(b.get("state", "")).startswith("active"))
    return _by_line(((_int(b.get("requested_size")) or _int(b.get("size")), b.get("frames")) for b in blocks), top)


def snapshot_memory(data: bytes, path: str = "", *, rank: int | None = None,
                    window: int | None = None) -> list[SnapshotMemory]:
    """Every device with a history in the snapshot ``data`` (a pickle's bytes)."""
    snapshot = load(data)
    found = (device_memory(snapshot, d, path, rank=rank, window=window)
             for d in range(len(snapshot["device_traces"])))
    return [m for m in found if m is not None]


def read_snapshots(paths: Iterable[tuple[str, int | None, int | None]]) -> tuple[list[SnapshotMemory], list[str]]:
    """The snapshots at ``(path, rank, window)`` (local or fsspec), and one line for each that could not be read."""
    from lightning_streamprof.trace.remote import filesystem

    out, problems = [], []
    for path, rank, window in paths:
        try:
            fs, local = filesystem(path)
            with fs.open(local, "rb") as f:
                data = f.read(SNAPSHOT_LIMIT + 1)
            if len(data) > SNAPSHOT_LIMIT:
                raise SnapshotError(f"larger than {SNAPSHOT_LIMIT >> 20} MiB")
            out += snapshot_memory(data, path, rank=rank, window=window)
        except Exception as err:  # noqa: BLE001 - a snapshot that cannot be read leaves the report without it
            problems.append(f"{path}: could not read the memory snapshot: {err}")
    return out, problems


def beside_traces(traces: Iterable[Any]) -> list[tuple[str, int | None, int | None]]:
    """``(path, rank, window)`` of the snapshot the profiler wrote beside each trace
    (``<window dir>/rank<R>.memory_snapshot.pickle``), where one is there."""
    from lightning_streamprof.trace.remote import filesystem

    out = []
    for t in traces:
        directory, _, name = str(t.path).replace("\\", "/").rpartition("/")
        if not directory or not name.startswith("rank"):
            continue
        path = f"{directory}/{name.split('.', 1)[0]}.{SNAPSHOT_SUFFIX}"
        try:
            fs, local = filesystem(path)
            if fs.exists(local):
                out.append((path, t.rank, t.window))
        except Exception:  # noqa: BLE001 - a store that cannot say leaves the report without the snapshot
            continue
    return out
