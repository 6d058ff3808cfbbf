"""Saved traces carry GPU utilization as a counter track (``"ph": "C"``), and analyse as before."""

import gzip
import json
import os

import orjson
import pytest

from lightning_streamprof import names
from lightning_streamprof.api import analyze
from lightning_streamprof.profiling.counters import add_counters, utilization_counters
from lightning_streamprof.results import to_builtins

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "traces", "frozen_backbone.pt.trace.json.gz")


def test_counters_follow_the_timeline():
    result = analyze(FIXTURE)
    events = utilization_counters(result)
    line = result.gpu[0].timeline
    util = [e for e in events if e["name"] == names.UTILIZATION_COUNTER]
    assert len(util) == len(line.starts_ns) + 1 and util[-1]["args"]["%"] == 0.0
    assert util[0]["ts"] == line.starts_ns[0] / 1000 and util[0]["pid"] == result.gpu[0].device
    assert [e["args"]["%"] for e in util[:-1]] == [round(100 * u, 2) for u in line.utilization]
    assert {e["ph"] for e in events} == {"C"}


@pytest.mark.parametrize("spacing", [b'"traceEvents": [', b'"traceEvents":[', b'"traceEvents" :\n  ['])
def test_splice(spacing):
    raw = b'{"schemaVersion": 1, ' + spacing + b'{"ph": "X", "name": "a", "ts": 1, "dur": 2}], "x": 1}'
    out = json.loads(add_counters(raw, [{"ph": "C", "name": "u", "ts": 1, "args": {"%": 5}}]))
    assert [e["ph"] for e in out["traceEvents"]] == ["C", "X"] and out["x"] == 1
    empty = json.loads(add_counters(b'{"traceEvents": [ ]}', [{"ph": "C"}]))
    assert empty["traceEvents"] == [{"ph": "C"}]
    assert add_counters(b'{"other": []}', [{"ph": "C"}]) == b'{"other": []}'


def test_a_trace_with_counters_analyses_the_same(tmp_path):
    raw = gzip.decompress(open(FIXTURE, "rb").read())
    before = analyze(FIXTURE)
    path = tmp_path / "with_counters.pt.trace.json"
    path.write_bytes(add_counters(raw, utilization_counters(before)))
    after = analyze(str(path))
    assert orjson.loads(path.read_bytes())["traceEvents"][0]["ph"] == "C"
    strip = lambda r: {k: v for k, v in to_builtins(r).items() if k not in ("traces", "run", "runs")}  # noqa: E731
    assert strip(after) == strip(before)
