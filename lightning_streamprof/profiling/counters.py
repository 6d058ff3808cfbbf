"""GPU utilization as a counter track in a saved trace (``"ph": "C"`` events), so Perfetto and chrome://tracing
show it on the timeline beside the GPU's streams."""

from __future__ import annotations

from typing import Any

import orjson

from lightning_streamprof import names
from lightning_streamprof.results import Result

_SM_COUNTER = "Est. SM efficiency (%)"


def utilization_counters(result: Result) -> list[dict[str, Any]]:
    """Counter events of each device's bucketed utilization and SM efficiency (percent), on the device's
    process (Kineto puts a GPU's kernels on ``pid`` = device index); a last point closes each track at 0."""
    events: list[dict[str, Any]] = []
    for gpu in result.gpu:
        line = gpu.timeline
        if line is None or not line.starts_ns:
            continue
        for name, values in ((names.UTILIZATION_COUNTER, line.utilization), (_SM_COUNTER, line.sm_efficiency)):
            points = [(start, value) for start, value in zip(line.starts_ns, values)] + [(line.end_ns, 0.0)]
            events += [{"ph": "C", "name": name, "pid": gpu.device, "tid": 0, "ts": start / 1000.0,
                        "args": {"%": round(100.0 * value, 2)}} for start, value in points]
    return events


def add_counters(raw: bytes, events: list[dict[str, Any]]) -> bytes:
    """``raw`` (a Kineto trace's JSON) with ``events`` first in its ``traceEvents`` list; unchanged when there are
    no events or the list is not found. Splices bytes: the trace is not parsed again."""
    if not events:
        return raw
    key = raw.find(b'"traceEvents"')
    if key < 0:
        return raw
    bracket = raw.find(b"[", key)
    colon = raw.find(b":", key)
    if bracket < 0 or colon < 0 or raw[colon + 1:bracket].strip():
        return raw
    rest = raw[bracket + 1:]
    body = b",".join(orjson.dumps(e) for e in events)
    empty = rest.lstrip().startswith(b"]")
    return raw[:bracket + 1] + body + (b"" if empty else b",") + rest
