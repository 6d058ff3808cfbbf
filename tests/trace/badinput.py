"""The rows of the bad-input table of docs/reliability.md as traces built in code: each a small valid trace with one defect."""

from __future__ import annotations

import copy
import gzip
import json

import orjson
from tracebuilder import TraceBuilder


def base() -> TraceBuilder:
    """Three steps, each with an operator launching one kernel, and one device's properties."""
    b = TraceBuilder()
    for i in range(3):
        b.step(i, i * 100, 90)
        ext = b.op("aten::mm", i * 100 + 5, 50)
        b.launch("gemm", i * 100 + 6, i * 100 + 10, 30, ext, blocks=2.0, occupancy=0.5)
        b.memory(i * 100 + 7, 512, 1024 * (i + 1), 4096)
    b.device_properties({"id": 0, "name": "GPU", "numSms": 132, "totalGlobalMem": 10**10, "computeMajor": 9})
    return b


def _kernel(b: TraceBuilder, n: int = 0) -> dict:
    return [e for e in b.events if e["cat"] == "kernel"][n]


def _with(edit):
    def make() -> bytes:
        b = base()
        edit(b)
        return gzip.compress(json.dumps(b.to_dict()).encode())  # json: integers beyond 64 bits too
    return make


def _raw(data: bytes):
    return lambda: data


def _set(path: str, value):
    """Set ``meta`` key path ``a.b`` (or ``a[0].b``) to ``value``."""
    def edit(b: TraceBuilder) -> None:
        target, *keys = path.replace("[0]", ".0").split(".")
        node = b.meta
        for key in [target, *keys][:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        last = [target, *keys][-1]
        node[int(last) if last.isdigit() else last] = value
    return edit


def _duplicate(b: TraceBuilder) -> None:
    b.events += copy.deepcopy(b.events)


def _drop_ts(b: TraceBuilder) -> None:
    for e in b.events[:3]:
        del e["ts"]


def _drop_dur(b: TraceBuilder) -> None:
    del b.events[1]["dur"]


def _all_negative(b: TraceBuilder) -> None:
    b.events = [{**e, "dur": -1} for e in b.events if e["ph"] == "X"]


VALID = gzip.compress(orjson.dumps(base().to_dict()))

#: id -> (bytes of the trace, reason in the one-line error)
REJECTED = {
    "not-json": (_raw(b"hello"), "invalid JSON"),
    "truncated-json": (_raw(b'{"traceEvents": [{"ph": "X"'), "truncated JSON"),
    "truncated-gzip": (_raw(VALID[:-6]), "corrupt or truncated gzip"),
    "empty-file": (_raw(b""), "empty file"),
    "no-trace-events": (_raw(b'{"foo": []}'), "not a Kineto trace"),
    "trace-events-empty": (_raw(b'{"traceEvents": []}'), "no events"),
    "distributed-info-type": (_with(_set("distributedInfo", [1, 2])),
                              "metadata 'distributedInfo' is a list, expected an object"),
    "distributed-info-rank-type": (_with(_set("distributedInfo.rank", "0")),
                                   "metadata 'distributedInfo.rank' is a string ('0'), expected an integer"),
    "device-properties-type": (_with(_set("deviceProperties", {"id": 0})),
                               "metadata 'deviceProperties' is an object, expected a list"),
    "device-properties-field-type": (_with(_set("deviceProperties[0].numSms", "many")),
                                     "metadata 'deviceProperties[0].numSms' is a string ('many'), expected an integer"),
    "device-properties-id-range": (_with(_set("deviceProperties[0].id", 2**40)),
                                   "metadata 'deviceProperties[0].id' 1099511627776 is out of range"),
    "streamprof-metadata-type": (_with(_set("streamprof", {"run": 5})),
                                 "metadata 'streamprof.run' is a number (5), expected a string"),
    "number-beyond-64-bits": (_with(lambda b: _kernel(b)["args"].update({"correlation": 2**70})),
                              "'args.correlation' 1180591620717411303424 is out of range"),
    "device-id-beyond-int16": (_with(lambda b: _kernel(b)["args"].update({"device": 70000})),
                               "'args.device' 70000 is out of range (-1..32767)"),
    "stream-beyond-int32": (_with(lambda b: _kernel(b)["args"].update({"stream": 2**33})),
                            "'args.stream' 8589934592 is out of range"),
    "duration-too-large": (_with(lambda b: _kernel(b).update({"dur": 1e16})),
                           "'dur' 1e+16 µs of event 'gemm' is out of range"),
    "duration-not-finite": (_with(lambda b: _kernel(b).update({"dur": 1e300})),
                            "'dur' 1e+300 µs of event 'gemm' is out of range"),
    "timestamp-negative": (_with(lambda b: _kernel(b).update({"ts": -5})), "'ts' -5.0 µs of event 'gemm' is out of range"),
    "timestamp-not-a-number": (_with(lambda b: _kernel(b).update({"ts": "soon"})), "non-numeric 'ts' or 'dur'"),
    "no-usable-event": (_with(_all_negative), "no usable events (ignored"),
}

#: id -> (bytes of the trace, what the warning says was ignored)
IGNORED = {
    "negative-duration": (_with(lambda b: b.events[0].update({"dur": -50})), "ignored 1 event(s) with a negative 'dur'"),
    "duplicated-events": (_with(_duplicate), "ignored 15 duplicated event(s)"),
    "missing-timestamp": (_with(_drop_ts), "ignored 3 event(s) without 'ts'"),
    "missing-duration": (_with(_drop_dur), "ignored 1 event(s) of phase 'X' without 'dur'"),
    "occupancy-above-100": (_with(lambda b: _kernel(b)["args"].update({"est. achieved occupancy %": 250})),
                            "ignored 'est. achieved occupancy %' of 1 kernel(s): outside 0..100"),
    "blocks-per-sm-negative": (_with(lambda b: _kernel(b)["args"].update({"blocks per SM": -3})),
                               "ignored 'blocks per SM' of 1 kernel(s): negative or infinite"),
    "memory-total-negative": (_with(lambda b: [e for e in b.events if e["name"] == "[memory]"][0]["args"].update(
        {"Total Allocated": -7})), "ignored negative 'Total Allocated' of 1 memory event(s)"),
}
