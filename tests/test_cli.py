import gzip
import json
import os
import subprocess
import sys

import pytest
from tracebuilder import TraceBuilder

from lightning_streamprof.api import SeveralRunsError, analyze, analyze_runs

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "traces")
CONTRACT_CATEGORIES = {"kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"}
CONTRACT_KEYS = {"run", "runs", "traces", "gpu", "steps", "kernels", "operators", "memory", "tensor_cores", "hta",
                 "recommendations", "source_lines", "host", "syncs", "pipeline", "distributed", "warnings"}


def streamprof(*args):
    return subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", *args], capture_output=True, text=True,
                          timeout=300)


def check_contract(result):
    """Every documented key, whatever the path held."""
    assert set(result) == CONTRACT_KEYS
    for gpu in result["gpu"]:
        assert {"device", "utilization", "sm_efficiency", "achieved_occupancy", "rank", "window"} <= set(gpu)
        for key in ("utilization", "sm_efficiency", "achieved_occupancy"):
            assert gpu[key] is None or 0 <= gpu[key] <= 1
    steps = result["steps"]
    assert set(steps) == {"count", "mean_ms", "breakdown_ms", "per_step"}
    assert steps["count"] >= 1 and steps["mean_ms"] > 0 and len(steps["per_step"]) == steps["count"]
    assert set(steps["breakdown_ms"]) == CONTRACT_CATEGORIES
    assert sum(steps["breakdown_ms"].values()) == pytest.approx(steps["mean_ms"], rel=1e-6)
    assert all(isinstance(s["step"], int) for s in steps["per_step"])
    assert isinstance(result["kernels"], list) and isinstance(result["operators"], list)
    assert set(result["memory"]) == {"devices", "operators"}
    assert {"tc_share", "eligible_share", "eligible_without_tc"} <= set(result["tensor_cores"])
    assert isinstance(result["source_lines"], list)
    for rec in result["recommendations"]:
        assert set(rec) == {"id", "message", "evidence", "summary"}
    for trace in result["traces"]:
        assert {"run", "window", "rank", "path"} <= set(trace)


def _json(*args):
    out = streamprof("analyze", *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _layout(root, run, window, first_step, rank, source):
    """Write the fixture trace ``source`` where and as StreamProfiler writes the trace of ``run``, ``window``,
    ``rank`` (its metadata says so too)."""
    target = root / run / f"w{window:03d}-step{first_step:07d}"
    target.mkdir(parents=True, exist_ok=True)
    with gzip.open(os.path.join(FIXTURES, f"{source}.pt.trace.json.gz")) as f:
        trace = json.load(f)
    trace["streamprof"] = {"run": run, "window": window, "first_step": first_step, "host": "node-a"}
    trace["distributedInfo"] = {**trace["distributedInfo"], "rank": rank}
    path = target / f"rank{rank}.1.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


def test_one_shape_for_a_file_a_directory_with_one_trace_and_one_with_many(tmp_path):
    one = tmp_path / "one"
    _layout(one, "fit-20261129-100000", 0, 12, 0, "frozen_backbone")
    many = tmp_path / "many"
    for window, source in enumerate(("frozen_backbone", "frozen_backbone_bf16")):
        _layout(many, "fit-20261129-100000", window, 12, 0, source)
    file_result = _json(os.path.join(FIXTURES, "frozen_backbone.pt.trace.json.gz"))
    one_result = _json(str(one))
    many_result = _json(str(many))
    for result in (file_result, one_result, many_result):
        check_contract(result)
    assert file_result["traces"][0]["path"].endswith("frozen_backbone.pt.trace.json.gz")
    (trace,) = one_result["traces"]
    assert (trace["run"], trace["window"], trace["rank"], trace["host"]) == ("fit-20261129-100000", 0, 0, "node-a")
    assert one_result["steps"] == file_result["steps"] and one_result["run"] == "fit-20261129-100000"
    assert [(t["window"], t["rank"]) for t in many_result["traces"]] == [(0, 0), (1, 0)]
    assert many_result["steps"]["count"] == 4 and len(many_result["gpu"]) == 2
    assert [s["window"] for s in many_result["steps"]["per_step"]] == [0, 0, 1, 1]


def test_several_runs_are_never_pooled(tmp_path):
    _layout(tmp_path, "fit-20261129-100000", 0, 12, 0, "frozen_backbone")
    _layout(tmp_path, "fit-20261129-110000", 0, 12, 0, "frozen_backbone_bf16")
    out = streamprof("analyze", str(tmp_path), "--json")
    assert out.returncode == 2 and out.stdout == ""
    assert "holds 2 runs (fit-20261129-100000, fit-20261129-110000); choose one with --run NAME" in out.stderr
    assert "run=NAME" not in out.stderr  # the command line's words, not the Python API's
    chosen = _json(str(tmp_path), "--run", "fit-20261129-110000")
    check_contract(chosen)
    assert chosen["run"] == "fit-20261129-110000" and chosen["steps"]["count"] == 2
    assert chosen["runs"] == ["fit-20261129-100000", "fit-20261129-110000"]
    text = streamprof("analyze", str(tmp_path))
    assert text.returncode == 0 and "run fit-20261129-100000" in text.stdout and "run fit-20261129-110000" in text.stdout
    with pytest.raises(SeveralRunsError, match=r"; choose one with run=NAME$"):
        analyze(tmp_path)
    assert [r.run for r in analyze_runs(tmp_path)] == ["fit-20261129-100000", "fit-20261129-110000"]


def _wide_trace(rank, offset):
    """One step with 60 operators and 60 kernels of distinct names (more than any top-50 list): operator ``op<i>``
    lasts 10 + i µs and launches kernel ``k<i>`` of 1 + i + offset µs."""
    b = TraceBuilder(rank=rank, world_size=2)
    b.step(1, 0, 10_000)
    t = 10
    for i in range(60):
        ext = b.op(f"op{i}", t, 10 + i)
        b.launch(f"k{i}", t + 1, 5_000 + 100 * i, 1 + i + offset, ext, rt_dur=1)
        t += 20 + i
    return b


def test_merged_totals_are_the_sums_over_all_traces(tmp_path):
    """Two ranks of one window: every kernel and operator total of the merged result is the sum over both traces,
    including the rows a top-50 list would have cut (i >= 50)."""
    for rank, offset in ((0, 0), (1, 3)):
        target = tmp_path / "fit-20261129-100000" / "w000-step0000001"
        target.mkdir(parents=True, exist_ok=True)
        _wide_trace(rank, offset).write(target / f"rank{rank}.1.pt.trace.json.gz")
    result = _json(str(tmp_path))
    check_contract(result)
    kernels = {k["name"]: k for k in result["kernels"]}
    operators = {o["name"]: o for o in result["operators"]}
    assert len(kernels) == len(operators) == 60
    for i in range(60):
        assert kernels[f"k{i}"]["calls"] == 2
        assert kernels[f"k{i}"]["total_ns"] == ((1 + i) + (1 + i + 3)) * 1000
        assert operators[f"op{i}"]["calls"] == 2
        assert operators[f"op{i}"]["host_total_ns"] == 2 * (10 + i) * 1000
        assert operators[f"op{i}"]["host_self_ns"] == 2 * (10 + i - 1) * 1000  # less its launch call
        assert operators[f"op{i}"]["device_self_ns"] == ((1 + i) + (4 + i)) * 1000
    assert sum(k["total_ns"] for k in result["kernels"]) == sum((1 + i) + (4 + i) for i in range(60)) * 1000
    assert [(t["rank"], t["window"]) for t in result["traces"]] == [(0, 0), (1, 0)]
    assert [s["rank"] for s in result["steps"]["per_step"]] == [0, 1]


def test_analyze_text_report():
    out = streamprof("analyze", os.path.join(FIXTURES, "frozen_backbone_memory_stack.pt.trace.json.gz"))
    assert out.returncode == 0, out.stderr
    assert "GPU utilization" in out.stdout and "Hot source lines" in out.stdout and "Kernels" in out.stdout


@pytest.mark.parametrize("content", [b"{not json", b'{"foo": []}'])
def test_bad_input_is_one_line_and_nonzero_exit(tmp_path, content):
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_bytes(content)
    out = streamprof("analyze", str(bad), "--json")
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0]


def test_missing_path():
    out = streamprof("analyze", "/nonexistent/trace.json")
    assert out.returncode == 2 and "no such file" in out.stderr


@pytest.mark.parametrize("command", [["report", "{bad}", "-o", "{out}"], ["compare", "{bad}", "{good}"],
                                     ["compare", "{good}", "{bad}"]])
def test_report_and_compare_bad_input_is_one_line_and_exit_2(tmp_path, command):
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_bytes(b"{not json")
    good = os.path.join(FIXTURES, "frozen_backbone.pt.trace.json.gz")
    out = tmp_path / "report.html"
    args = [a.format(bad=bad, good=good, out=out) for a in command]
    done = streamprof(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamprof: error: ") and str(bad) in lines[0]
    assert not out.exists()


def test_report_to_an_unwritable_place_is_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    target = blocker / "report.html"
    done = streamprof("report", os.path.join(FIXTURES, "frozen_backbone.pt.trace.json.gz"), "-o", str(target))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"streamprof: error: {target}: cannot write")


def test_report_and_compare_warn_about_skipped_traces(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.pt.trace.json.gz").write_bytes(open(os.path.join(FIXTURES, "frozen_backbone.pt.trace.json.gz"),
                                                      "rb").read())
    (run / "rank1.pt.trace.json.gz").write_bytes(b"\x1f\x8b broken")
    done = streamprof("report", str(run), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("streamprof: warning: ") == 1 and "rank1.pt.trace.json.gz: skipped" in done.stderr
    done = streamprof("compare", str(run), os.path.join(FIXTURES, "frozen_backbone.pt.trace.json.gz"))
    assert done.returncode == 0 and done.stderr.count("streamprof: warning: ") == 1
