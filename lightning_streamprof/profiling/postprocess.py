"""What a finished window's trace goes through before it is written: the GPU utilization counter track (when
its analysis is known) and gzip (ISA-L). The analysis worker does it for traces that recorded device work; the
export thread does it for the others and whenever the worker could not."""

from __future__ import annotations

from isal import igzip

from lightning_streamprof.profiling.counters import add_counters, utilization_counters
from lightning_streamprof.results import Result


def gzipped_trace(raw: bytes, level: int, analysis: Result | None = None) -> bytes:
    """``raw`` (a Kineto trace's JSON) gzipped at ISA-L ``level``, with ``analysis``'s counter track first in its
    events when given."""
    if analysis is not None:
        raw = add_counters(raw, utilization_counters(analysis))
    return igzip.compress(raw, compresslevel=level, mtime=0)
