"""Deep and wide values: a value nested about 1,000 lists deep (between Python's recursion limit and the JSON
readers' 1,024 levels) is text without recursion or a one-line error, never ``internal error: RecursionError``; a
few kilobytes of gzip holding millions of values are refused by the value budget before the memory is spent; an
event holding a wide list of objects costs the chunked reader a few decodes, not one per ``},{`` inside it."""

import gzip
import json
import os
import re
import subprocess
import sys
import zlib

import orjson
import pytest
from badinput import VALID, base
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_streamprof.cli import main
from lightning_streamprof.trace import TraceFormatError, parse_trace

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "traces")
HTA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..", "shared",
                   "data", "hta", "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
DEPTH = 1000  # above the recursion limit (repr, str and orjson.dumps fail), below the JSON readers' 1,024 levels
_HOLE = "\x00deep\x00"


def deep_text(depth: int = DEPTH, leaf: str = '"x"') -> str:
    return "[" * depth + leaf + "]" * depth


def _op(b):
    return next(e for e in b.events if e["cat"] == "cpu_op")


def _kernel(b):
    return next(e for e in b.events if e["cat"] == "kernel")


def _meta(*path):
    def edit(b):
        node = b.meta
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
        node[path[-1]] = _HOLE
    return edit


#: where the deep value goes -> the reason of the one-line error (None: the trace is analysed)
DEEP = {
    "kernel-name": (lambda b: _kernel(b).update(name=_HOLE), None),
    "operator-name": (lambda b: _op(b).update(name=_HOLE), None),
    "input-dims": (lambda b: _op(b)["args"].update({"Input Dims": _HOLE}), None),
    "collective-name": (lambda b: _op(b)["args"].update({"Collective name": _HOLE, "dtype": _HOLE, "Seq": 1}), None),
    "kernel-collective": (lambda b: _kernel(b)["args"].update({"Collective name": _HOLE, "Process Group Name": _HOLE}),
                          None),
    "unknown-argument": (lambda b: _op(b)["args"].update({"whatever": _HOLE}), None),
    "host-name": (_meta("host_name"), None),
    "rank": (_meta("distributedInfo", "rank"), "metadata 'distributedInfo.rank' is a list ([[[[[[["),
    "run": (_meta("streamprof", "run"), "metadata 'streamprof.run' is a list ([[[[[[["),
    "device-name": (_meta("deviceProperties", 0, "name"), "metadata 'deviceProperties[0].name' is a list ([[[[[[["),
}


def deep_trace(edit, depth: int = DEPTH) -> bytes:
    b = base()
    b.meta["streamprof"] = {"run": "deep", "window": 0, "first_step": 0, "host": "h"}
    edit(b)
    text = json.dumps(b.to_dict())
    assert json.dumps(_HOLE) in text
    return gzip.compress(text.replace(json.dumps(_HOLE), deep_text(depth)).encode())


def _run(capsys, *args):
    code = main(list(map(str, args)))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", ["analyze", "analyze --json", "report", "compare"])
@pytest.mark.parametrize("case", sorted(DEEP))
def test_deep_value_is_a_result_or_one_line(tmp_path, capsys, case, command):
    edit, reason = DEEP[case]
    path = tmp_path / "run" / "rank0.pt.trace.json.gz"
    path.parent.mkdir()
    path.write_bytes(deep_trace(edit))
    other = tmp_path / "other" / "rank0.pt.trace.json.gz"
    other.parent.mkdir()
    other.write_bytes(VALID)
    args = {"analyze": ["analyze", path], "analyze --json": ["analyze", "--json", path],
            "report": ["report", path, "-o", tmp_path / "report.html"], "compare": ["compare", other, path]}[command]
    code, out, err = _run(capsys, *args)  # was: internal error: RecursionError, exit 1
    assert "internal error" not in err, err
    if reason is None:
        assert code == 0, err
        if command == "analyze --json" and case in ("kernel-name", "operator-name"):
            names = [k["name"] for k in json.loads(out)["kernels" if case == "kernel-name" else "operators"]]
            assert "[" * DEPTH + "'x'" + "]" * DEPTH in names  # the name as str() of the list would write it
    else:
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert lines[0].startswith(f"streamprof: error: {path}: ") and reason in lines[0], lines[0]


def test_past_the_readers_depth_is_one_line(tmp_path, capsys):
    path = tmp_path / "deeper.pt.trace.json.gz"
    path.write_bytes(deep_trace(DEEP["operator-name"][0], depth=1030))
    code, out, err = _run(capsys, "analyze", path)
    assert code == 2 and err.startswith(f"streamprof: error: {path}: invalid JSON (") and err.count("\n") == 1, err


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None, database=None)
@given(json_values, st.integers(0, 60))
def test_value_text_is_repr_without_recursion(value, limit):
    from lightning_streamprof.trace.checks import value_text

    assert value_text(value) == repr(value)
    assert value_text(value, limit) == repr(value)[: limit + 1]


def test_value_text_of_deep_and_huge_values():
    from lightning_streamprof.trace.checks import _show, value_text

    deep = orjson.loads(deep_text(1020, '{"a": [1, 2.5, null]}'))
    assert value_text(deep) == "[" * 1020 + "{'a': [1, 2.5, None]}" + "]" * 1020
    assert _show(deep) == "[" * 39 + "…"
    wide = [[i] for i in range(200_000)]
    assert _show(wide) == "[[0], [1], [2], [3], [4], [5], [6], [7]…"


# ------------------------------------------------------------------------------------------------ the value budget
def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(9, wbits=31)
    return packer.compress(data) + packer.flush()


def _zeros(n: int, where: str) -> bytes:
    zeros = b"0," * (n - 1) + b"0"
    if where == "events":
        return b'{"traceEvents": [' + zeros + b"]}"
    return (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1, '
            b'"args": {"' + where.encode() + b'": [' + zeros + b"]}}]}")


#: the command under a memory limit (address space), set by the child itself
LIMITED = ("import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, ({0}, {0})); "
           "sys.argv[0] = 'streamprof'; runpy.run_module('lightning_streamprof.cli', run_name='__main__')")


@pytest.mark.parametrize("where", ["events", "Input Dims", "x"])
def test_twenty_million_zeros_are_refused_before_the_memory_is_spent(tmp_path, where):
    path = tmp_path / "zeros.pt.trace.json.gz"
    path.write_bytes(_gzip(_zeros(20_000_000, where)))
    assert os.path.getsize(path) < 40_000  # 38 MB of JSON, far below the inflation floor
    out = subprocess.run([sys.executable, "-c", LIMITED.format(768 << 20), "analyze", str(path)],
                         capture_output=True, text=True, timeout=120)  # was 2,486 MiB and 7 s to say "no events"
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert re.fullmatch(
        rf"streamprof: error: {re.escape(str(path))}: too many values \(more than 8,388,608 list entries and object "
        r"members: 10 per byte of its 3\d\.\d KiB, at least 8,388,608; \$STREAMPROF_MAX_VALUES sets the factor\)",
        lines[0]), lines[0]


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize("where", ["events", "Input Dims", "x"])
def test_the_budget_is_checked_before_decoding(monkeypatch, gzipped, where):
    from lightning_streamprof.trace import limits, reader
    from lightning_streamprof.trace.columns import ColumnBuilder

    monkeypatch.setattr(limits, "VALUES_FLOOR", 1000)
    monkeypatch.setenv("STREAMPROF_MAX_VALUES", "0.05")  # below the floor: the limit is 1,000 values
    data = _zeros(5000, where)
    data = _gzip(data) if gzipped else data
    assert limits.value_limit(len(data)) == 1000

    def not_now(*args):
        raise AssertionError("decoded before the budget was checked")

    monkeypatch.setattr(ColumnBuilder, "add_json", not_now)
    monkeypatch.setattr(reader.orjson, "loads", not_now)
    reason = r"^zeros: too many values \(more than 1,000 list entries and object members: 0.05 per byte of its "
    with pytest.raises(TraceFormatError, match=reason):
        parse_trace(data, "zeros")
    with pytest.raises(TraceFormatError, match=reason):
        reader.parse_document(data, "zeros")
    monkeypatch.undo()  # within the budget: read as before
    if where == "events":
        with pytest.raises(TraceFormatError, match="no events"):
            parse_trace(data, "zeros")
    else:
        assert len(parse_trace(data, "zeros")) == 1


def test_the_budget_scales_with_the_file_and_is_configurable(monkeypatch):
    from lightning_streamprof.trace.limits import FLOOR, VALUES_FLOOR, value_limit

    assert value_limit(1000) == VALUES_FLOOR == 1 << 23
    assert value_limit(100 << 20) == 10 * (100 << 20)
    assert value_limit(None) == 10 * FLOOR
    monkeypatch.setenv("STREAMPROF_MAX_VALUES", "50")
    assert value_limit(100 << 20) == 50 * (100 << 20)
    for bad in ("many", "-3", "0"):
        monkeypatch.setenv("STREAMPROF_MAX_VALUES", bad)
        assert value_limit(100 << 20) == 10 * (100 << 20)


def _values(doc) -> int:
    """List entries and object members, walked."""
    count, stack = 0, [doc]
    while stack:
        node = stack.pop()
        children = node if isinstance(node, list) else node.values() if isinstance(node, dict) else ()
        count += len(children)
        stack.extend(children)
    return count


@settings(max_examples=200, deadline=None, database=None)
@given(json_values)
def test_count_values_bounds_the_values(value):
    from lightning_streamprof.trace.limits import count_values

    text = json.dumps(value).encode()
    assert count_values(text) == count_values(memoryview(text)) >= _values(value)


def test_real_traces_are_far_below_the_budget():
    """The reason of the limit: real traces hold 0.5 to 1 value per byte of .gz, the budget 10 (and a floor)."""
    from lightning_streamprof.trace.limits import count_values, value_limit

    paths = sorted(os.path.join(d, name) for d, _, names in os.walk(FIXTURES) for name in names
                   if name.endswith(".json.gz"))
    names = {os.path.basename(p) for p in paths}
    paths += [HTA] if os.path.exists(HTA) and os.path.basename(HTA) not in names else []
    assert len(paths) >= 7
    for path in paths:
        raw = open(path, "rb").read()
        data = gzip.decompress(raw)
        values = count_values(data)
        assert _values(orjson.loads(data)) <= values < 0.08 * len(data), path
        assert values * 10 < value_limit(len(raw)), path  # 10 times as many as real traces hold
        parse_trace(raw, path)


# ------------------------------------------------------------------------------------------------ wide lists
def test_a_wide_list_of_objects_costs_a_few_decodes(monkeypatch):
    """A cut proposed at every ``},{`` of an event's wide list of objects fails (the chunk is truncated); it was
    retried at the next one, decoding the chunk again each time (hours for a few megabytes)."""
    from lightning_streamprof.trace.blocks import memory_pieces
    from lightning_streamprof.trace.chunked import read_chunked
    from lightning_streamprof.trace.columns import ColumnBuilder
    from lightning_streamprof.trace.reader import parse_document

    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(300)]
    events[100]["args"] = {"x": [{}] * 100_000, "External id": 7}
    data = orjson.dumps({"traceEvents": events})
    decodes = []
    add_json = ColumnBuilder.add_json

    def counted(self, chunk):
        decodes.append(len(chunk))
        assert len(decodes) < 200, "a decode per candidate cut"
        add_json(self, chunk)

    monkeypatch.setattr(ColumnBuilder, "add_json", counted)
    table = read_chunked(memory_pieces(data, 1 << 16), "<wide>", chunk_size=1 << 12)
    assert table is not None and len(decodes) < 60
    expected = parse_document(data)
    assert table.names == expected.names and (table.ts == expected.ts).all()
    assert (table.external_id == expected.external_id).all()
