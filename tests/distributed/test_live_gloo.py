"""Two-process DDP (gloo, CPU) runs with StreamProfiler: an injected straggler is found live (logged, warned,
written beside the traces) and from the trace directory; three balanced runs flag nobody."""

import csv
import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from lightning_streamprof.api import analyze
from lightning_streamprof.distributed.live import DISTRIBUTED_FILE, PAYLOAD_LIMIT, payload
from lightning_streamprof.results import DistributedStats, from_json

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "straggler_program.py")
BASE_MS, EXTRA_MS = 100, 100


def run_program(out, base_ms, extra_ms):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run([sys.executable, PROGRAM, str(out), str(base_ms), str(extra_ms)], capture_output=True,
                          text=True, timeout=400, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "rank 0 done, 2 windows" in proc.stdout and "rank 1 done, 2 windows" in proc.stdout
    with open(os.path.join(out, "distributed.json")) as f:
        live = json.load(f)
    (run_dir,) = [os.path.join(out, "traces", d) for d in os.listdir(os.path.join(out, "traces"))]
    return {"live": live, "stderr": proc.stderr, "run_dir": run_dir, "out": str(out)}


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    return run_program(tmp_path_factory.mktemp("straggler"), BASE_MS, EXTRA_MS)


@pytest.fixture(scope="module")
def balanced(tmp_path_factory):
    return [run_program(tmp_path_factory.mktemp(f"balanced{i}"), BASE_MS, 0) for i in range(3)]


def test_live_straggler_flagged_in_every_window(straggler):
    live = straggler["live"]
    assert len(live) == 2  # both windows gathered and scored on rank 0
    for stats in live:
        ranks = {r["rank"]: r for r in stats["ranks"]}
        assert stats["stragglers"] == [1] and stats["missing_ranks"] == []
        assert ranks[1]["relative_score"] < 0.75 and ranks[0]["relative_score"] == 1.0
        assert ranks[0]["sync_ms"] > ranks[1]["sync_ms"] + 0.5 * EXTRA_MS
        assert ranks[1]["host_ms"] > 0.8 * EXTRA_MS  # the sleep is host time
        assert stats["message"].startswith("Rank 1 (host ")
    warned = re.findall(r"StreamProfiler: window \d: Rank 1 \(host .*\) is a straggler", straggler["stderr"])
    assert len(warned) == 2  # once per window


def test_distributed_json_beside_each_window_and_logged(straggler):
    run_dir = straggler["run_dir"]
    windows = sorted(d for d in os.listdir(run_dir) if os.path.isdir(os.path.join(run_dir, d)))
    assert len(windows) == 2 and "report.html" in os.listdir(run_dir)  # the run's report beside its windows
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as f:
        html = f.read()
    # rank 0's report holds both ranks: the distributed view flags rank 1, and no note says a rank is missing
    assert "Traces not found" not in html and "Could not read" not in html
    assert "is a straggler" in html and html.count("rank 1") >= 1
    for w in windows:
        with open(os.path.join(straggler["run_dir"], w, DISTRIBUTED_FILE), "rb") as f:
            stats = from_json(f.read(), DistributedStats)
        assert stats.stragglers == [1] and [r.rank for r in stats.ranks] == [0, 1]
        # HTA reads every *.json / *.gz file of a window directory as a trace: only the traces are there
        files = [f for f in os.listdir(os.path.join(straggler["run_dir"], w)) if f.endswith((".json", ".gz"))]
        assert len(files) == 2 and all(f.endswith(".pt.trace.json.gz") for f in files)
    (metrics,) = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(straggler["out"], "logs")) for f in fs
                  if f == "metrics.csv"]
    with open(metrics) as f:
        rows = [r for r in csv.DictReader(f) if r.get("streamprof/straggler_score")]
    assert len(rows) == 2
    for row in rows:
        assert float(row["streamprof/straggler_score"]) < 0.75 and float(row["streamprof/stragglers"]) == 1
        assert float(row["streamprof/rank1/step_ms"]) > BASE_MS + EXTRA_MS
        assert float(row["streamprof/rank0/sync_ms"]) > float(row["streamprof/rank1/sync_ms"])


def test_post_hoc_finds_the_same_straggler(straggler):
    d = analyze(straggler["run_dir"]).distributed
    assert d.world_size == 2 and d.stragglers == [1] and len(d.windows) == 2
    r0, r1 = d.ranks
    assert r1.relative_score < 0.75 and r0.sync_ms > r1.sync_ms
    assert {o.name for o in d.comm_ops} >= {"all_reduce"}
    assert all(w.late_rank == 1 for w in d.late_starts if w.max_wait_ns > 0.5 * EXTRA_MS * 1e6)


def test_traces_carry_the_rank_as_hta_reads_it_and_payload_is_small(straggler):
    for dirpath, _, files in os.walk(straggler["run_dir"]):
        for name in files:
            if name.endswith(".pt.trace.json.gz"):
                with gzip.open(os.path.join(dirpath, name), "rt") as f:
                    text = f.read()
                rank = int(name[4])
                assert re.search(r'"distributedInfo": \{[^}]*"rank": %d' % rank, text), name
    d = analyze(straggler["run_dir"])
    from lightning_streamprof.api import analyze_runs

    for window in analyze_runs(straggler["run_dir"])[0].windows:
        for r in window.ranks:
            assert len(payload(r.distributed.summaries[0])) < PAYLOAD_LIMIT
    assert d.distributed is not None


def test_three_balanced_runs_flag_nobody(balanced):
    for run in balanced:
        for stats in run["live"]:
            assert stats["stragglers"] == [] and stats["missing_ranks"] == [], stats["ranks"]
            assert stats["message"] is None
        assert "is a straggler" not in run["stderr"]
        assert analyze(run["run_dir"]).distributed.stragglers == []
