"""Hand-built Kineto traces for tests: every event placed by hand so each metric has a known answer."""

from __future__ import annotations

import gzip
import json


class TraceBuilder:
    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        self.events: list[dict] = []
        self.meta = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size}}
        self._ext = 0

    def op(self, name, ts, dur, tid=1, pid=100, cat="cpu_op", **args):
        self._ext += 1
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                 "args": {"External id": self._ext, **args}}
        self.events.append(event)
        return self._ext

    def kernel(self, name, ts, dur, external_id, device=0, stream=7, cat="kernel", **args):
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
                            "args": {"External id": external_id, "device": device, "stream": stream, **args}})

    def to_dict(self) -> dict:
        return {**self.meta, "traceEvents": self.events}

    def write(self, path, compress: bool = True):
        data = json.dumps(self.to_dict()).encode()
        with open(path, "wb") as f:
            f.write(gzip.compress(data) if compress else data)
        return path
