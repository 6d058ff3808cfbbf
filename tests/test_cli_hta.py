"""``streamprof analyze`` with HTA's analyses: text and ``--json`` on HTA's AMD fixture, and exact merges over the
windows and ranks of a run directory."""

import gzip
import json
import os
import subprocess
import sys

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "traces")
AMD = os.path.join(FIXTURES, "hta", "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
AUGMENT = os.path.join(FIXTURES, "streamprof_augment.pt.trace.json.gz")


def streamprof(*args):
    out = subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", "analyze", *args], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_amd_fixture_launches_and_matrix_cores():
    """HTA's MI250 trace: 12 hipLaunchKernel, 2 hipExtModuleLaunchKernel (the Tensile GEMMs) and 2 hipMemcpyWithStream
    calls paired with their device events; 7 kernel launches on the training thread inside its 2 steps; the two
    ``_MI16x16x1_`` GEMMs on the matrix cores, so no Tensor Core advice."""
    result = json.loads(streamprof(AMD, "--json"))
    launches = {x["name"]: x["launches"] for x in result["hta"]["launches"]["launches"]}
    assert launches == {"hipLaunchKernel": 12, "hipExtModuleLaunchKernel": 2, "hipMemcpyWithStream": 2}
    assert result["host"]["launches"] == 7
    (gpu,) = result["gpu"]
    assert (gpu["vendor"], gpu["matrix_cores"], gpu["warp_size"], gpu["num_sms"]) == ("amd", True, 64, 104)
    assert "tensor_cores" not in {r["id"] for r in result["recommendations"]}
    text = streamprof(AMD)
    row = next(line for line in text.splitlines() if line.startswith("│ hipLaunchKernel "))
    assert row.split("│")[2].strip() == "12"
    assert "without Tensor Cores" not in text and "matrix cores" in text
    assert "(3.5 kernel launches;" in text  # 7 on the training thread in 2 steps


def _layout(root, window, rank):
    target = root / "fit-1" / f"w{window:03d}-step{10 * window:07d}"
    target.mkdir(parents=True, exist_ok=True)
    with gzip.open(AUGMENT) as f:
        trace = json.load(f)
    trace["streamprof"] = {"run": "fit-1", "window": window, "first_step": 10 * window}
    trace["distributedInfo"] = {**trace.get("distributedInfo", {}), "rank": rank, "world_size": 2}
    with gzip.open(target / f"rank{rank}.1.pt.trace.json.gz", "wt") as f:
        json.dump(trace, f)


def test_run_directory_merges_every_analysis_exactly(tmp_path):
    """Two windows x two ranks of one trace: every sum is 4 times the trace's, per-stream rows stay one per rank,
    every step's critical path is kept."""
    one = json.loads(streamprof(AUGMENT, "--json"))["hta"]
    for window in (0, 1):
        for rank in (0, 1):
            _layout(tmp_path, window, rank)
    run = json.loads(streamprof(str(tmp_path), "--json"))["hta"]
    hooks = {r["name"]: r for r in run["hooks"]["rows"]}
    for r in one["hooks"]["rows"]:
        assert hooks[r["name"]]["self_kernel_ns"] == 4 * r["self_kernel_ns"]
        assert hooks[r["name"]]["host_ns"] == 4 * r["host_ns"]
    assert run["hooks"]["kernel_ns"] == 4 * one["hooks"]["kernel_ns"]
    assert [(s["rank"], s["stream"]) for s in run["idle"]["streams"]] == [(0, 7), (1, 7)]
    (s1,) = one["idle"]["streams"]
    assert run["idle"]["streams"][0]["host_wait_ns"] == 2 * s1["host_wait_ns"]
    assert sum(x["launches"] for x in run["launches"]["launches"]) == \
        4 * sum(x["launches"] for x in one["launches"]["launches"])
    assert len(run["critical_path"]["steps"]) == 4 * len(one["critical_path"]["steps"])
    assert run["queue"]["streams"][1]["max_length"] == one["queue"]["streams"][0]["max_length"]
    copies = {c["name"]: c for c in run["bandwidth"]["copies"]}
    for c in one["bandwidth"]["copies"]:
        assert copies[c["name"]]["bytes"] == 4 * c["bytes"]
