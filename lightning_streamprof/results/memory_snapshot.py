"""What the CUDA caching allocator's history says of a window: the allocated and reserved memory over time and the
largest live allocations at the peak, by the user's line that made them (from PyTorch's memory snapshot)."""

from __future__ import annotations

import msgspec


class _Struct(msgspec.Struct, frozen=True, kw_only=True):
    """Immutable, keyword-built."""


class LiveAllocations(_Struct):
    """The allocations live at the peak that one line of code made: ``location`` (``file:line``, the first frame
    outside torch and Lightning; a text in parentheses when no frame was recorded), its ``function``, their bytes and
    count."""

    location: str
    function: str
    bytes: int
    count: int


class SnapshotMemory(_Struct):
    """One device of one window's snapshot (``path``): ``curve`` of ``(microseconds since the first event,
    allocated, reserved)`` bytes (downsampled), the peak allocated and when, reserved at its peak, the live
    allocations at the peak by line (largest first), and how many history entries it replayed. The sizes are those
    asked for; ``blocks_peak`` is ``torch.cuda.max_memory_allocated()`` over the window where the recording process
    kept it: the allocator's blocks, each request rounded up (None: not known, as for a snapshot read post hoc)."""

    path: str
    device: int
    curve: list[tuple[int, int, int]]
    peak_allocated: int
    peak_reserved: int
    peak_us: int
    at_peak: list[LiveAllocations]
    entries: int
    rank: int | None = None
    window: int | None = None
    blocks_peak: int | None = None
