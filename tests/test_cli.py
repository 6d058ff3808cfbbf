import json
import os
import shutil
import subprocess
import sys

import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "traces")
CONTRACT_CATEGORIES = {"kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"}


def streamprof(*args):
    return subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", *args], capture_output=True, text=True, timeout=300)


def check_contract(result):
    for gpu in result["gpu"]:
        assert {"device", "utilization", "sm_efficiency", "achieved_occupancy"} <= set(gpu)
        assert 0 <= gpu["utilization"] <= 1 and 0 <= gpu["sm_efficiency"] <= 1 and 0 <= gpu["achieved_occupancy"] <= 1
    steps = result["steps"]
    assert steps["count"] >= 1 and steps["mean_ms"] > 0
    assert set(steps["breakdown_ms"]) == CONTRACT_CATEGORIES
    assert sum(steps["breakdown_ms"].values()) == pytest.approx(steps["mean_ms"], rel=1e-6)
    assert isinstance(result["kernels"], list) and isinstance(result["operators"], list)
    assert isinstance(result["memory"], dict)
    for rec in result["recommendations"]:
        assert set(rec) >= {"id", "message", "evidence"}


def test_analyze_json_contract_on_real_trace():
    out = streamprof("analyze", os.path.join(FIXTURES, "frozen_backbone.pt.trace.json.gz"), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    check_contract(result)
    assert result["gpu"][0]["device"] == 0 and result["steps"]["count"] == 2


def test_analyze_directory(tmp_path):
    for name in ("frozen_backbone", "frozen_backbone_bf16"):
        shutil.copy(os.path.join(FIXTURES, f"{name}.pt.trace.json.gz"), tmp_path / f"{name}.pt.trace.json.gz")
    out = streamprof("analyze", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    check_contract(result)
    assert len(result["traces"]) == 2 and result["steps"]["count"] == 4


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
