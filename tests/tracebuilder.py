"""Hand-built Kineto traces for tests: every event placed by hand so each metric has a known answer.

Times are in microseconds, as in Kineto JSON (the reader turns them into nanoseconds).
"""

from __future__ import annotations

import gzip
import json

import orjson

from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.trace import parse_trace


class TraceBuilder:
    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        self.events: list[dict] = []
        self.meta = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size}}
        self._ext = 0
        self._corr = 0
        self._python_id = 0

    def op(self, name, ts, dur, tid=1, pid=100, cat="cpu_op", **args):
        self._ext += 1
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                 "args": {"External id": self._ext, **args}}
        self.events.append(event)
        return self._ext

    def kernel(self, name, ts, dur, external_id, device=0, stream=7, cat="kernel", **args):
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
                            "args": {"External id": external_id, "device": device, "stream": stream, **args}})

    def annotation(self, name, ts, dur, tid=1, pid=100):
        """A ``record_function`` range (``user_annotation``)."""
        return self.op(name, ts, dur, tid=tid, pid=pid, cat="user_annotation")

    def step(self, number, ts, dur, tid=1, pid=100, gpu_copy: bool = False):
        """``ProfilerStep#number``; with ``gpu_copy`` also the GPU-side ``gpu_user_annotation`` copy."""
        ext = self.annotation(f"ProfilerStep#{number}", ts, dur, tid=tid, pid=pid)
        if gpu_copy:
            self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{number}", "pid": 0,
                                "tid": 7, "ts": ts + 1, "dur": dur, "args": {"External id": ext}})
        return ext

    def runtime(self, name, ts, dur, external_id, correlation=None, tid=1, pid=100, cat="cuda_runtime"):
        """A runtime (or, with ``cat="cuda_driver"``, driver) call; returns its correlation id."""
        if correlation is None:
            self._corr += 1
            correlation = self._corr
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                            "args": {"External id": external_id, "correlation": correlation}})
        return correlation

    def launch(self, name, rt_ts, ts, dur, external_id, device=0, stream=7, blocks=None, occupancy=None,
               cat="kernel", rt_name="cudaLaunchKernel", rt_dur=1, rt_cat="cuda_runtime", tid=1, **args):
        """A runtime call at ``rt_ts`` and the device activity it launched (linked by correlation)."""
        corr = self.runtime(rt_name, rt_ts, rt_dur, external_id, tid=tid, cat=rt_cat)
        if blocks is not None:
            args["blocks per SM"] = blocks
        if occupancy is not None:
            args["est. achieved occupancy %"] = occupancy * 100
        self.kernel(name, ts, dur, external_id, device=device, stream=stream, cat=cat, correlation=corr, **args)
        return corr

    def memory(self, ts, nbytes, total_allocated, total_reserved, addr=0, device=0, device_type=1, tid=1, pid=100):
        """A ``[memory]`` instant event (``nbytes`` < 0 is a free)."""
        self.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": pid, "tid": tid,
                            "ts": ts, "args": {"Total Reserved": total_reserved, "Total Allocated": total_allocated,
                                               "Bytes": nbytes, "Addr": addr, "Device Type": device_type,
                                               "Device Id": device}})

    def frame(self, name, ts, dur, tid=1, pid=100, parent=-1):
        """A ``with_stack`` Python frame, e.g. ``"train.py(10): training_step"``; returns its Python id."""
        self._python_id += 1
        self.events.append({"ph": "X", "cat": "python_function", "name": name, "pid": pid, "tid": tid, "ts": ts,
                            "dur": dur, "args": {"Python id": self._python_id, "Python parent id": parent}})
        return self._python_id

    def device_properties(self, *devices: dict):
        """``deviceProperties`` entries, e.g. ``{"id": 0, "totalGlobalMem": ..., "numSms": 132, "computeMajor": 9}``."""
        self.meta["deviceProperties"] = list(devices)

    def to_dict(self) -> dict:
        return {**self.meta, "traceEvents": self.events}

    def table(self):
        """The :class:`EventTable` of this trace."""
        return parse_trace(orjson.dumps(self.to_dict()), "<built>")

    def context(self):
        """The analysis context of this trace."""
        return TraceContext(self.table())

    def write(self, path, compress: bool = True):
        data = json.dumps(self.to_dict()).encode()
        with open(path, "wb") as f:
            f.write(gzip.compress(data) if compress else data)
        return path
