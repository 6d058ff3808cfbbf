"""The fuzz target: generated and mutated Kineto traces through the reader, every analysis, merging, the JSON
encoder and the terminal renderer.

The only exception allowed is :class:`~lightning_streamprof.trace.TraceFormatError` (one line naming the
source); every clean result must keep the invariants (:func:`lightning_streamprof.results.invariants.violations`),
encode as JSON and render without a control character. Used by ``test_fuzz.py`` (a short run in the test suite)
and ``benchmarks/fuzz_traces.py`` (the long run).

Besides odd values, the shapes that used to break the reader or the analysis: values nested about 1,000 lists deep
(between Python's recursion limit and the JSON readers' 1,024 levels), wide lists (of zeros, of objects inside an
event; the value budget runs at a floor of :data:`VALUES_FLOOR` here so that some of them meet it) and long chains
of nested operators.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gzip
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from hypothesis import strategies as st

from lightning_streamprof.analysis import analyze_table, combine
from lightning_streamprof.report.text import render_analysis
from lightning_streamprof.results import TraceIdentity, to_json
from lightning_streamprof.results.invariants import violations
from lightning_streamprof.trace import TraceFormatError, limits, parse_trace
from lightning_streamprof.trace.identity import trace_identity

SOURCE = "fuzz.pt.trace.json"
FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "traces",
                       "frozen_backbone.pt.trace.json.gz")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: the value budget's floor while fuzzing (8.4 million in use): wide lists of 100,000 values meet it when gzipped
VALUES_FLOOR = 1 << 16


# ------------------------------------------------------------------------------------------------ the target
@contextlib.contextmanager
def python_recursion_limit() -> Iterator[None]:
    """Python's own recursion limit (1,000), which the ``streamprof`` command runs under: hypothesis raises it while
    a test runs, which would hide what a value nested 1,000 deep does to ``repr``."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def run_target(data: bytes) -> str:
    """``"rejected"`` (a TraceFormatError) or ``"clean"``; AssertionError for a broken promise."""
    with python_recursion_limit():
        return _run(data)


def _run(data: bytes) -> str:
    try:
        with mock.patch.object(limits, "VALUES_FLOOR", VALUES_FLOOR):
            table = parse_trace(data, SOURCE)
        result = analyze_table(table, TraceIdentity(path=SOURCE, rank=0, window=0))
    except TraceFormatError as err:
        message = str(err)
        assert message.startswith(f"{SOURCE}: ") and "\n" not in message and err.reason, message
        return "rejected"
    problems = violations(result)
    assert problems == [], problems
    to_json(result)
    to_json(trace_identity(f"fit-1/w000-step0/rank0.{SOURCE}", table.metadata))  # the metadata read as written
    text = render_analysis(result, top=5)
    assert not _CONTROL.search(text), repr(_CONTROL.search(text).group())
    merged = combine([result, result], run="fuzz")
    assert violations(merged) == [], violations(merged)
    assert merged.steps.count == 2 * result.steps.count
    return "clean"


# ------------------------------------------------------------------------------------------------ values
HUGE = [2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63), -(2**64), -(2**31) - 1]
FLOATS = [1e300, -1e300, 1e16, 1e18, 9.3e15, -1e-300, 0.5, -0.0, 1.5e308]
ODD = ["", "12.5", "x", "NaN", None, True, False, [], [1, 2], {}, {"a": 1}]
NAMES = ["[/x]", "[bold]x", "[link=file:///etc/passwd]x[/link]", "\x1b[2J\x1b[31mred\x1b[0m", "a\rb", "\x07\x08",
         "line\nbreak", "rtl\u202eevil", "<script>alert(1)</script>", "ProfilerStep#", "ProfilerStep#-1",
         "ProfilerStep#99999999999999999999999", "nccl:all_reduce", "enumerate(DataLoader)#_x.__next__",
         "[pl][profile][StreamPipeline].stage_on_thread", "Optimizer.step#SGD.step", "\ud7ff\ue000\U0001f600",
         "/etc/passwd(1): f", "train.py(12): training_step", "x" * 300]
CATEGORIES = ["cpu_op", "user_annotation", "gpu_user_annotation", "python_function", "cuda_runtime", "cuda_driver",
              "kernel", "gpu_memcpy", "gpu_memset", "cpu_instant_event", "ac2g", "Trace", "Kernel", "", None, 5]
NUMERIC_KEYS = ["ts", "dur", "pid", "tid"]
ARG_KEYS = ["External id", "external id", "correlation", "device", "stream", "bytes", "blocks per SM",
            "est. achieved occupancy %", "Device Type", "Device Id", "Bytes", "Total Allocated", "Total Reserved",
            "Addr", "Python id", "Python parent id", "Input Dims"]
META_PATHS = [("distributedInfo",), ("distributedInfo", "rank"), ("distributedInfo", "world_size"),
              ("deviceProperties",), ("deviceProperties", 0), ("deviceProperties", 0, "id"),
              ("deviceProperties", 0, "numSms"), ("deviceProperties", 0, "totalGlobalMem"),
              ("deviceProperties", 0, "name"), ("streamprof",), ("streamprof", "run"), ("streamprof", "window"),
              ("streamprof", "first_step"), ("streamprof", "host")]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
numbers = st.sampled_from(HUGE + FLOATS) | st.integers(-(10**6), 10**6) | st.floats(-1e6, 1e6)
any_value = numbers | st.sampled_from(ODD) | json_values


@dataclasses.dataclass(frozen=True)
class Deep:
    """``leaf`` (JSON text) inside ``depth`` lists, written by :func:`_encode` (``json`` itself recurses)."""

    depth: int
    leaf: str

    def text(self) -> str:
        return "[" * self.depth + self.leaf + "]" * self.depth


#: about Python's recursion limit, up to and past the JSON readers' 1,024 levels, and a shallower one
deep_values = st.builds(Deep, st.sampled_from([1010, 1019, 1000, 990, 1030, 200]),
                        st.sampled_from(['"x"', "0", "{}", '{"a": [1, 2.5]}', "[]"]))
WIDTHS = [1_000, 20_000, 100_000]
#: where a deep value goes: a key of an event, a key of its args, or a metadata path
DEEP_PLACES = ["name", "name", "cat", "ts", "pid", "args.Input Dims", "args.Input type", "args.Collective name",
               "args.Process Group Name", "args.x", "meta", "meta"]
DEEP_META = [("streamprof", "run"), ("streamprof", "host"), ("distributedInfo", "rank"),
             ("deviceProperties", 0, "name"), ("deviceProperties", 0, "numSms"), ("host_name",), ("streamprof",)]


# ------------------------------------------------------------------------------------------------ generated traces
@st.composite
def built_traces(draw: st.DrawFn) -> dict[str, Any]:
    """A plausible trace: steps with operators, runtime calls, kernels (several devices and streams), copies,
    memory events, Python frames and GPU-side step copies."""
    events: list[dict[str, Any]] = []
    ext = corr = pyid = 0
    t = draw(st.integers(0, 10**9))
    for step in range(draw(st.integers(0, 4))):
        length = draw(st.integers(1, 500))
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": t, "dur": length, "args": {"External id": (ext := ext + 1)}})
        if draw(st.booleans()):
            events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{step}", "pid": 0,
                           "tid": 7, "ts": t + 1, "dur": length, "args": {"External id": ext}})
        for _ in range(draw(st.integers(0, 4))):
            start = t + draw(st.integers(0, length))
            dur = draw(st.integers(0, length))
            name = draw(st.sampled_from(["aten::mm", "aten::add", "nccl:all_reduce", "Optimizer.step#SGD.step",
                                         "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]))
            cat = draw(st.sampled_from(["cpu_op", "user_annotation"]))
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": draw(st.sampled_from([1, 2])),
                           "ts": start, "dur": dur, "args": {"External id": (ext := ext + 1),
                                                           "Input Dims": [[2, 3], []]}})
            for _ in range(draw(st.integers(0, 3))):
                rt = start + draw(st.integers(0, max(dur, 1)))
                events.append({"ph": "X", "cat": draw(st.sampled_from(["cuda_runtime", "cuda_driver"])),
                               "name": draw(st.sampled_from(["cudaLaunchKernel", "cudaStreamSynchronize",
                                                             "cudaMemcpyAsync"])),
                               "pid": 1, "tid": 1, "ts": rt, "dur": draw(st.integers(0, 20)),
                               "args": {"External id": ext, "correlation": (corr := corr + 1)}})
                kind = draw(st.sampled_from(["kernel", "kernel", "gpu_memcpy", "gpu_memset"]))
                device = draw(st.sampled_from([0, 0, 1]))
                args = {"External id": ext, "correlation": corr, "device": device,
                        "stream": draw(st.sampled_from([7, 8, 20])), "bytes": draw(st.integers(0, 10**6))}
                if kind == "kernel":
                    args["blocks per SM"] = draw(st.floats(0, 8))
                    args["est. achieved occupancy %"] = draw(st.integers(0, 100))
                events.append({"ph": "X", "cat": kind, "pid": device, "tid": args["stream"],
                               "name": draw(st.sampled_from(["gemm", "ncclDevKernel_AllReduce", "elementwise",
                                                             "Memcpy HtoD", "sm90_xmma_gemm"])),
                               "ts": rt + draw(st.integers(0, 50)), "dur": draw(st.integers(0, 100)), "args": args})
            if draw(st.booleans()):
                events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
                               "tid": 1, "ts": start, "args": {
                                   "Total Reserved": 1 << 20, "Total Allocated": draw(st.integers(0, 1 << 20)),
                                   "Bytes": draw(st.integers(-4096, 4096)), "Addr": draw(st.integers(0, 2**40)),
                                   "Device Type": draw(st.sampled_from([0, 1])), "Device Id": 0}})
            if draw(st.booleans()):
                events.append({"ph": "X", "cat": "python_function", "pid": 1, "tid": 1, "ts": start, "dur": dur,
                               "name": draw(st.sampled_from(["train.py(12): training_step", "torch/nn.py(1): f"])),
                               "args": {"Python id": (pyid := pyid + 1), "Python parent id": pyid - 1}})
        t += length + draw(st.integers(0, 50))
    nested = draw(st.sampled_from([0, 0, 0, 40, 2000]))
    if nested:
        ext, corr = _nested_operators(events, nested, t, ext, corr, draw(st.booleans()))
        t += 4 * nested + 10
    events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": 1, "ts": 0,
                   "dur": t + 1})
    events.append({"ph": "s", "cat": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 0})
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "H200", "numSms": 132, "totalGlobalMem": 10**11, "computeMajor": 9}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
            "streamprof": {"run": "fit-1", "window": 0, "first_step": 0, "host": "h"},
            "traceEvents": events}


def _nested_operators(events: list[dict[str, Any]], n: int, t: int, ext: int, corr: int,
                      in_step: bool) -> tuple[int, int]:
    """A step (or none) holding ``n`` CPU operators each inside the previous, each allocating and freeing memory,
    the innermost launching a kernel; returns the last External id and correlation."""
    if in_step:
        events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#99", "pid": 1, "tid": 1, "ts": t,
                       "dur": 4 * n + 4, "args": {"External id": (ext := ext + 1)}})
    for k in range(n):
        events.append({"ph": "X", "cat": "cpu_op", "name": ("aten::linear", "aten::addmm", "aten::mm")[k % 3],
                       "pid": 1, "tid": 1, "ts": t + 1 + k, "dur": 4 * n - 2 * k,
                       "args": {"External id": (ext := ext + 1)}})
        for at, nbytes in ((t + 1 + k, 4096), (t + 4 * n - k, -4096)):
            events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                           "ts": at, "args": {"Total Reserved": 1 << 30, "Total Allocated": 4096 * (k + 1),
                                              "Bytes": nbytes, "Addr": k, "Device Type": 1, "Device Id": 0}})
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + n + 1,
                   "dur": 1, "args": {"External id": ext, "correlation": (corr := corr + 1)}})
    events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + n + 2, "dur": 5,
                   "args": {"External id": ext, "correlation": corr, "device": 0, "stream": 7}})
    return ext, corr


_FIXTURE_CACHE: list[dict[str, Any]] = []


def _fixture() -> dict[str, Any]:
    if not _FIXTURE_CACHE:
        with gzip.open(FIXTURE) as f:
            _FIXTURE_CACHE.append(json.load(f))
    return _FIXTURE_CACHE[0]


@st.composite
def real_slices(draw: st.DrawFn) -> dict[str, Any]:
    """A slice of a real H200 trace (Lightning-made, with its metadata)."""
    doc = _fixture()
    events = doc["traceEvents"]
    start = draw(st.integers(0, len(events) - 1))
    return {**{k: copy.deepcopy(v) for k, v in doc.items() if k != "traceEvents"},
            "traceEvents": copy.deepcopy(events[start:start + draw(st.integers(1, 300))])}


# ------------------------------------------------------------------------------------------------ mutations
def _set_path(doc: dict[str, Any], path: tuple, value: Any) -> None:
    node: Any = doc
    for key in path[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return
    try:
        node[path[-1]] = value
    except (IndexError, TypeError):
        pass


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy) -> dict[str, Any]:
    """``base`` with a few mutations: metadata type swaps, odd or huge numbers in any numeric field, odd names and
    categories, missing keys, duplicated events."""
    doc = draw(base)
    events = doc["traceEvents"]
    for _ in range(draw(st.integers(0, 4))):
        what = draw(st.sampled_from(["meta", "number", "arg", "name", "cat", "drop", "dup", "dup-all", "ph"]))
        if what == "meta":
            _set_path(doc, draw(st.sampled_from(META_PATHS)), draw(any_value))
            continue
        if not events:
            continue
        ev = events[draw(st.integers(0, len(events) - 1))]
        if not isinstance(ev, dict):
            continue
        if what == "number":
            ev[draw(st.sampled_from(NUMERIC_KEYS))] = draw(any_value)
        elif what == "arg":
            args = ev.setdefault("args", {})
            if isinstance(args, dict):
                args[draw(st.sampled_from(ARG_KEYS))] = draw(any_value)
        elif what == "name":
            ev["name"] = draw(st.sampled_from(NAMES) | st.text(max_size=20))
        elif what == "cat":
            ev["cat"] = draw(st.sampled_from(CATEGORIES))
        elif what == "drop":
            ev.pop(draw(st.sampled_from(["ts", "dur", "ph", "cat", "name", "args", "pid"])), None)
        elif what == "ph":
            ev["ph"] = draw(st.sampled_from(["X", "i", "M", "B", "E", "s", "f", "", 3]))
        elif what == "dup":
            events.insert(draw(st.integers(0, len(events))), copy.deepcopy(ev))
        else:
            events.extend(copy.deepcopy(events))
    return doc


@st.composite
def shaped(draw: st.DrawFn, base: st.SearchStrategy) -> dict[str, Any]:
    """``base``, a third of the time with a deep value (an event's key or argument, or metadata) or a wide list."""
    doc = draw(base)
    events = [ev for ev in doc["traceEvents"] if isinstance(ev, dict)]
    shape = draw(st.sampled_from(["none", "none", "none", "none", "deep", "wide"]))
    if shape == "wide":
        where = draw(st.sampled_from(["events", "args.Input Dims", "args.x", "meta"]))
        _widen(doc, where, draw(st.sampled_from(WIDTHS)))
    elif shape == "deep":
        place = draw(st.sampled_from(DEEP_PLACES))
        if place == "meta" or not events:
            _set_path(doc, draw(st.sampled_from(DEEP_META)), draw(deep_values))
        else:
            ev = events[draw(st.integers(0, len(events) - 1))]
            node = ev.setdefault("args", {}) if place.startswith("args.") else ev
            if isinstance(node, dict):
                node[place.removeprefix("args.")] = draw(deep_values)
    return doc


def _widen(doc: dict[str, Any], where: str, width: int) -> None:
    """A list of ``width`` zeros (of empty objects inside an event) at ``where``."""
    events = doc["traceEvents"]
    if where == "events":
        events.extend([0] * width)
    elif where == "meta":
        doc["wide"] = [0] * width
    elif events and isinstance(events[0], dict) and isinstance(events[0].setdefault("args", {}), dict):
        events[0]["args"][where.removeprefix("args.")] = [0] * width if where == "args.Input Dims" else [{}] * width


def _encode(doc: dict[str, Any]) -> bytes:
    """JSON of ``doc``, each :class:`Deep` value written in place of a placeholder."""
    deep: list[Deep] = []

    def placeholder(value: Any) -> str:
        if not isinstance(value, Deep):
            raise TypeError(type(value).__name__)
        deep.append(value)
        return f"\x00deep{len(deep) - 1}\x00"

    text = json.dumps(doc, allow_nan=False, default=placeholder)
    for i, value in enumerate(deep):
        text = text.replace(json.dumps(f"\x00deep{i}\x00"), value.text(), 1)
    return text.encode()


@st.composite
def trace_bytes(draw: st.DrawFn) -> bytes:
    """A generated or real-sliced trace, mutated, perhaps deep or wide, encoded (plain or gzipped), perhaps
    truncated or with a few bytes changed."""
    doc = draw(shaped(mutated(st.one_of(built_traces(), real_slices()))))
    data = _encode(doc)
    cut = draw(st.sampled_from(["none", "none", "none", "truncate", "flip"]))
    if cut == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif cut == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    if draw(st.booleans()):
        data = gzip.compress(data)
        if draw(st.integers(0, 9)) == 0:
            data = data[: draw(st.integers(0, len(data)))]
    return data


def counting(target: Callable[[bytes], str], counts: dict[str, int]) -> Callable[[bytes], None]:
    """``target`` that tallies its outcomes in ``counts``."""
    def run(data: bytes) -> None:
        outcome = target(data)
        counts[outcome] = counts.get(outcome, 0) + 1
    return run
