"""FSDP and FSDP2 under Lightning on GPUs (benchmarks/distributed_fsdp.py): one GPU (world 1), and two GPUs with
NCCL (skipped with fewer): all-gathers and reduce-scatters matched by sequence number, hidden vs exposed time, the
injected straggler flagged live and post hoc, a balanced run clean. ``$STREAMPROF_BENCH_OUT``: where the result
files go (else the test's temporary directory)."""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import bench_out

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp_path, devices: int, tag: str) -> dict:
    out = bench_out(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"))}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "distributed_fsdp.py"), "--devices",
                           str(devices), "--parallel", "--out", out, "--tag", tag, "--work",
                           str(tmp_path / "runs"), "--timeout", "200"], capture_output=True, text=True, timeout=540,
                          env=env)
    (name,) = [f for f in os.listdir(out) if f.startswith(f"distributed_fsdp-{tag}-") and f.endswith(".json")]
    with open(os.path.join(out, name)) as f:
        results = {r["scenario"]: r for r in json.load(f)["results"]}
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return results


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_fsdp_and_fsdp2_on_one_gpu(tmp_path):
    results = _run(tmp_path, 1, "h200-one")
    assert set(results) == {"fsdp-one", "fsdp2-one"}
    for r in results.values():
        assert r["ok"], (r["scenario"], r.get("problems"), r.get("error"))


@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_fsdp_and_fsdp2_nccl_two_gpus(tmp_path):
    results = _run(tmp_path, 2, "h200x2")
    assert set(results) == {"fsdp-straggler", "fsdp2-straggler", "fsdp2-balanced"}
    for name, r in results.items():
        assert r["ok"], (name, r.get("problems"), r.get("error"))
        post = r["post_hoc"]
        assert post["matched_by_seq"] > 0, name  # NCCL calls carry Seq: matched by group, name and sequence number
        assert {"all_gather", "reduce_scatter"} <= {k["kind"] for k in post["kinds"]}
        assert all(k["hidden_ns"] is not None for k in post["kinds"])
        expect = [1] if name.endswith("straggler") else []
        assert post["stragglers"] == expect and all(w["stragglers"] == expect for w in r["live"])
