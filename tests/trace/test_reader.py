import gzip

import numpy as np
import pytest
from tracebuilder import TraceBuilder

from lightning_streamprof.trace import Kind, TraceFormatError, read_trace


def test_reads_plain_and_gzipped(tmp_path):
    b = TraceBuilder(rank=3, world_size=4)
    ext = b.op("aten::mm", ts=1000.5, dur=10.25)
    b.kernel("gemm", ts=1002.0, dur=5.0, external_id=ext)
    b.events.append({"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "python"}})
    for path in (b.write(tmp_path / "a.json.gz"), b.write(tmp_path / "a.json", compress=False)):
        t = read_trace(str(path))
        assert len(t) == 2  # metadata events are not events
        assert list(t.kind) == [Kind.CPU_OP, Kind.KERNEL]
        assert t.ts.tolist() == [1_000_500, 1_002_000] and t.dur.tolist() == [10_250, 5_000]
        assert t.names[t.name[1]] == "gemm" and t.external_id.tolist() == [ext, ext]
        assert t.metadata["distributedInfo"]["rank"] == 3


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"hello", "invalid JSON"),
        (b'{"traceEvents": [{"ph": "X"', "truncated JSON"),
        (b'{"foo": 1}', "not a Kineto trace"),
        (gzip.compress(b'{"traceEvents": []}')[:-6], "corrupt or truncated gzip"),
        (b"", "empty file"),
    ],
)
def test_bad_files_name_file_and_reason(tmp_path, content, reason):
    path = tmp_path / "bad.pt.trace.json"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as err:
        read_trace(str(path))
    message = str(err.value)
    assert message.startswith(str(path)) and reason in message and "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        read_trace(str(tmp_path / "nope.json"))


def test_cpu_only_trace_has_no_device_events(tmp_path):
    b = TraceBuilder()
    b.op("aten::add", 0, 5)
    t = read_trace(str(b.write(tmp_path / "cpu.json.gz")))
    assert np.count_nonzero(t.kind == Kind.KERNEL) == 0


FIXTURES = __import__("pathlib").Path(__file__).parent.parent / "fixtures" / "traces"


def test_real_h200_traces():
    for path in sorted(FIXTURES.glob("*.pt.trace.json.gz")):
        t = read_trace(str(path))
        kernels = t.select(Kind.KERNEL)
        assert kernels.size > 100, path.name
        assert np.all(t.device[kernels] == 0) and np.all(t.stream[kernels] >= 0)
        assert np.all((t.occupancy[kernels] >= 0) & (t.occupancy[kernels] <= 1) | np.isnan(t.occupancy[kernels]))
        assert t.metadata["deviceProperties"][0]["name"] == "NVIDIA H200"
        runtime_corr = set(t.correlation[t.select(Kind.RUNTIME, Kind.DRIVER)].tolist())
        assert set(t.correlation[kernels].tolist()) <= runtime_corr  # every kernel has its launch
        steps = [t.names[i] for i in t.name[t.select(Kind.USER_ANNOTATION)] if t.names[i].startswith("ProfilerStep#")]
        first = 201 if path.name.startswith("augment") else 12  # the profiled window of each recording
        assert steps == [f"ProfilerStep#{n}" for n in range(first, first + len(steps))] and len(steps) >= 2
    memory = read_trace(str(FIXTURES / "frozen_backbone_memory_stack.pt.trace.json.gz"))
    mem = memory.select(Kind.MEMORY)
    assert mem.size > 0 and memory.total_allocated[mem].max() > 0
    assert memory.select(Kind.PYTHON_FUNCTION).size > 1000
    assert (memory.shapes >= 0).sum() > 0
