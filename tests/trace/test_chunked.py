"""The chunked reader gives exactly the whole-document reader's table, whatever the layout or chunking."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from lightning_streamprof.trace import TraceFormatError, parse_trace, read_trace
from lightning_streamprof.trace.blocks import gunzip, memory_pieces
from lightning_streamprof.trace.chunked import read_chunked
from lightning_streamprof.trace.reader import COLUMNS, checked, parse_document

FIXTURES = sorted((Path(__file__).parent.parent / "fixtures" / "traces").glob("*.pt.trace.json.gz"))


def assert_same(a, b):
    assert a.source == b.source and a.names == b.names and a.metadata == b.metadata
    for name, dtype, _ in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == np.dtype(dtype), name
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name


def chunked(data: bytes, chunk_size: int = 1 << 22, piece: int = 1 << 20):
    return read_chunked(memory_pieces(data, piece), "<bytes>", chunk_size)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixtures_fast_path_equals_whole_document(path):
    raw = path.read_bytes()
    expected = parse_document(raw, str(path))
    assert_same(read_trace(str(path)), expected)
    plain = gzip.decompress(raw)
    for chunk_size, piece in ((1 << 22, 1 << 20), (1 << 16, 4099), (700, 1 << 20), (1, 997)):
        for data in (raw, plain):
            table = read_chunked(memory_pieces(data, piece), str(path), chunk_size)
            assert table is not None, (chunk_size, piece)
            assert_same(table, expected)


def event(i, **extra):
    ev = {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 2, "ts": 1000.5 + i, "dur": 2.25,
          "args": {"External id": i}}
    ev.update(extra)
    return ev


def sample_events():
    return [
        event(0, name='a "quoted" }, {"name": ] [ , } name'),
        event(1, name="},{", args={"External id": 1, "Input Dims": [[2, 3], []], "Concrete Inputs": ["}", "]"]}),
        {"ph": "X", "cat": "Kernel", "name": "k}", "pid": 0, "tid": 7, "ts": 1003.0, "dur": 1.0,
         "args": {"External id": 1, "correlation": 9, "device": 0, "stream": 7, "blocks per SM": 1.5,
                  "est. achieved occupancy %": 50, "grid": [1, 2, 3], "nested": {"a": {"b": "}"}}}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "copy", "pid": 3, "tid": 4, "ts": 1004, "args": {}},
        {"ph": "X", "cat": "gpu_memset", "name": "set", "pid": 3, "tid": 4, "ts": 1004},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 1005,
         "args": {"Device Type": 1, "Device Id": 0, "Bytes": -512, "Total Allocated": 1024, "Total Reserved": 2048,
                  "Addr": 140487945617408}},
        {"ph": "X", "cat": "python_function", "name": "f", "pid": 1, "tid": 2, "ts": 1006, "dur": 1,
         "args": {"Python id": 5, "Python parent id": None}},
        {"ph": "s", "cat": "ac2g", "id": 9, "pid": 1, "tid": 2, "ts": 1000},
        {"ph": "X", "cat": "fwdbwd", "name": "flow", "pid": 1, "tid": 2, "ts": 1000},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "i", "s": "g", "name": "Iteration Start", "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": 999},
        {"ph": "i", "name": "Record Window End", "pid": "", "tid": "7", "ts": 1010},
        {"name": "no ph, no cat", "ts": 1},
    ]


META = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceName": "t}]{["}


def layouts():
    events = sample_events()
    yield "kineto", json.dumps({**META, "traceEvents": events, "end": 1})
    yield "events first", json.dumps({"traceEvents": events, **META})
    yield "events last", json.dumps({**META, "traceEvents": events})
    yield "pretty", json.dumps({**META, "traceEvents": events}, indent=4)
    yield "compact", json.dumps({**META, "traceEvents": events}, separators=(",", ":"))
    yield "empty", json.dumps({**META, "traceEvents": []})
    yield "empty pretty", json.dumps({**META, "traceEvents": []}, indent=2)
    yield "only events", json.dumps({"traceEvents": events})
    yield "crlf", json.dumps({**META, "traceEvents": events}, indent=1).replace("\n", "\r\n")


def odd_documents():
    events = sample_events()
    yield "numbers as strings", json.dumps({"traceEvents": [event(0, ts="12.5", dur="3"), event(1)]})
    yield "string ids", json.dumps({"traceEvents": [event(0, args={"External id": "7", "correlation": "x"})]})
    yield "float ids", json.dumps({"traceEvents": [event(0, pid=1.5, args={"External id": 7.0})]})
    yield "bool values", json.dumps({"traceEvents": [event(0, pid=True, args={"External id": False})]})
    yield "null name and cat", json.dumps({"traceEvents": [event(0, name=None, cat=None), event(1, name=5)]})
    yield "non-object events", json.dumps({"traceEvents": [1, "x", None, event(0), [event(1)]]})
    yield "args not an object", json.dumps({"traceEvents": [event(0, args=[1, 2]), event(1, args=None)]})
    yield "kineto key in metadata", json.dumps({"meta": {"traceEvents": [event(9)]}, "traceEvents": events})
    yield "key text in a string", json.dumps({"note": '"traceEvents": [', "traceEvents": events})
    yield "duplicate key", '{"traceEvents": [%s], "traceEvents": [%s]}' % (json.dumps(event(0)), json.dumps(event(1)))
    yield "nested objects after events", json.dumps({"traceEvents": events, "x": [{"a": 1}, {"b": [{"c": {}}]}]})


@pytest.mark.parametrize("label, text", list(layouts()), ids=lambda v: v if len(v) < 30 else "")
def test_layouts_take_fast_path_and_match(label, text):
    data = text.encode()
    expected = parse_document(data)
    for chunk_size in (1, 50, 333, 1 << 20):
        for piece in (1, 7, 1 << 20):
            table = chunked(data, chunk_size, piece)
            assert table is not None, (label, chunk_size, piece)
            assert_same(table, expected)
    if label.startswith("empty"):  # a trace without events is refused
        with pytest.raises(TraceFormatError, match="no events"):
            parse_trace(gzip.compress(data))
    else:
        assert_same(parse_trace(gzip.compress(data)), checked(expected))


@pytest.mark.parametrize("label, text", list(odd_documents()), ids=lambda v: v if len(v) < 30 else "")
def test_odd_documents_match_whole_document_reader(label, text, tmp_path):
    data = text.encode()
    try:
        expected = parse_document(data)
    except TraceFormatError as err:
        with pytest.raises(TraceFormatError) as got:
            parse_trace(data)
        assert str(got.value) == str(err)
        return
    for chunk_size in (1, 64, 1 << 20):
        assert_same(parse_trace(data), checked(expected))
        table = chunked(data, chunk_size, 5)
        if table is not None:
            assert_same(table, expected)
    path = tmp_path / "odd.json.gz"
    path.write_bytes(gzip.compress(data))
    table = read_trace(str(path))
    assert table.source == str(path)
    assert_same(checked(parse_document(data, str(path))), table)


def test_event_split_across_chunks_and_pieces():
    events = [event(i, name=("}, {" * (i % 5)) + '\\"]' + "x" * i) for i in range(300)]
    data = json.dumps({**META, "traceEvents": events}, indent=2).encode()
    expected = parse_document(data)
    for chunk_size in range(1, 400, 37):
        for piece in (3, 64, 1000):
            assert_same(chunked(data, chunk_size, piece), expected)


def test_multi_member_gzip():
    data = json.dumps({**META, "traceEvents": sample_events()}).encode()
    half = len(data) // 2
    raw = gzip.compress(data[:half]) + gzip.compress(data[half:])
    assert b"".join(gunzip(memory_pieces(raw, 10))) == data
    assert_same(parse_trace(raw), checked(parse_document(data)))


BIG = json.dumps({**META, "traceEvents": [event(i) for i in range(20000)]}).encode()


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"hello", "invalid JSON"),
        (b"{", "truncated JSON"),
        (BIG[: len(BIG) // 2], "truncated JSON"),
        (BIG[:-1], "truncated JSON"),
        (BIG.replace(b'"op1999"', b'"op1999" garbage'), "invalid JSON"),
        (b'{"foo": 1}', "not a Kineto trace"),
        (b'{"traceEvents": {}}', "not a Kineto trace"),
        (b"[]", "not a Kineto trace"),
        (gzip.compress(BIG)[:-6], "corrupt or truncated gzip"),
        (gzip.compress(BIG)[: len(gzip.compress(BIG)) // 2], "corrupt or truncated gzip"),
        (gzip.compress(BIG)[:100] + b"\x00" * 1000, "corrupt or truncated gzip"),
        (b"", "empty file"),
    ],
)
def test_errors_are_one_line_and_name_the_file(tmp_path, content, reason):
    for name in ("bad.pt.trace.json", "bad.pt.trace.json.gz"):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(TraceFormatError) as err:
            read_trace(str(path))
        message = str(err.value)
        assert message.startswith(f"{path}: ") and reason in message and "\n" not in message
        assert err.value.source == str(path)
    if content:
        with pytest.raises(TraceFormatError, match=reason):
            parse_trace(content, source="mem")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file") as err:
        read_trace(str(tmp_path / "nope.json.gz"))
    assert str(err.value).startswith(str(tmp_path / "nope.json.gz"))
    with pytest.raises(TraceFormatError) as err:
        read_trace(str(tmp_path))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("private", [True, False], ids=["remapped", "copied"])
def test_mapped_columns_grow_keep_their_rows_and_survive_pickling(private, monkeypatch):
    """Columns live in anonymous maps that double when full (remapped where private maps exist, else copied into
    a new map); the table's arrays stay valid and picklable."""
    import pickle

    from lightning_streamprof.trace import columns
    from lightning_streamprof.trace.columns import MappedColumn

    if not private:
        monkeypatch.setattr(columns, "_PRIVATE", {})
    column = MappedColumn(np.int64, rows=4)
    column.rows(3)[:] = [7, 8, 9]
    column.grow(8, kept=3)
    column.rows(8)[3:] = np.arange(5)
    assert column.capacity == 8 and column.rows(8).tolist() == [7, 8, 9, 0, 1, 2, 3, 4]
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "ts": i, "dur": 1, "pid": 0, "tid": 7,
               "args": {"device": 0, "stream": 7, "correlation": i}} for i in range(70_000)]
    data = json.dumps({"traceEvents": events}).encode()
    table = chunked(data, chunk_size=1 << 16)  # many chunks: the columns grow past their first 65,536 rows
    assert_same(table, parse_document(data))
    again = pickle.loads(pickle.dumps(table))
    assert again.correlation.tolist() == list(range(70_000))
