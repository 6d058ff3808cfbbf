"""Two GPUs, NCCL: the injected straggler is found live and post hoc, with Lightning and with a plain
torch.profiler + DistributedDataParallel loop, and balanced runs flag nobody (benchmarks/distributed_stragglers.py).

Runs as ``pytest -m gpu`` on a machine with 2 GPUs (skipped with fewer). With ``$STREAMPROF_BENCH_OUT`` set, the
benchmark's result files are written there (else in the test's temporary directory).
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import bench_out

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_nccl_stragglers_found_and_balanced_runs_clean(tmp_path):
    out = bench_out(tmp_path)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "distributed_stragglers.py"),
                           "--accelerator", "gpu", "--out", out, "--tag", "h200x2-test", "--timeout", "120"],
                          capture_output=True, text=True, timeout=540)
    (result,) = [f for f in os.listdir(out) if f.startswith("distributed_stragglers-h200x2-test") and
                 f.endswith(".json")]
    with open(os.path.join(out, result)) as f:
        results = json.load(f)["results"]
    assert {r["scenario"] for r in results} == {"lightning-straggler", "lightning-balanced", "plain-straggler",
                                                "plain-balanced"}
    for r in results:
        assert r.get("ok"), (r["scenario"], r.get("error"), r.get("post_hoc"), r.get("live"))
        ranks = {row["rank"]: row for row in r["post_hoc"]["ranks"]}
        assert set(ranks) == {0, 1}
        assert r["post_hoc"]["comm_ops"], r["scenario"]  # NCCL collectives were found and matched
        if r["scenario"].endswith("straggler"):
            assert ranks[0]["sync_ms"] > ranks[1]["sync_ms"] and ranks[1]["relative_score"] < 0.75
        if r["scenario"].startswith("lightning"):
            assert r["live"] and all(w["missing_ranks"] == [] for w in r["live"])
    assert proc.returncode == 0, proc.stdout[-3000:]
