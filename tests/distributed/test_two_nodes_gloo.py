"""Two nodes of two processes each on this machine (Lightning ``num_nodes=2``, gloo): the live gather goes through
each node's local rank 0 and flags the straggler on node 1; each node's trace directory alone lacks the other's
ranks, and ``streamprof report`` of both directories holds all four."""

import json
import os
import socket
import subprocess
import sys

import pytest

from lightning_streamprof.api import analyze

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "two_node_program.py")


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("nodes")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"))}
    env.update(CUDA_VISIBLE_DEVICES="", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_port()))
    nodes = [subprocess.Popen([sys.executable, PROGRAM, str(out), "60", "120"], env={**env, "NODE_RANK": str(n)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (0, 1)]
    logs = [p.communicate(timeout=400) for p in nodes]
    for p, (stdout, stderr) in zip(nodes, logs):
        assert p.returncode == 0, stderr[-4000:]
    with open(out / "distributed.json") as f:
        live = json.load(f)
    runs = [os.path.join(out, f"node{n}") for n in (0, 1)]
    return {"out": out, "live": live, "dirs": runs, "stderr": logs[0][1]}


def test_live_gather_through_each_node_flags_the_straggler(run):
    assert run["live"], "no window gathered"
    for stats in run["live"]:
        assert stats["missing_ranks"] == [] and [r["rank"] for r in stats["ranks"]] == [0, 1, 2, 3]
        assert stats["stragglers"] == [3]


def test_each_nodes_directory_alone_and_both_as_one_run(run):
    alone = analyze(run["dirs"][0]).distributed
    assert [r.rank for r in alone.ranks] == [0, 1] and alone.missing_ranks == [2, 3]
    both = analyze(run["dirs"]).distributed
    assert [r.rank for r in both.ranks] == [0, 1, 2, 3] and both.missing_ranks == [] and both.stragglers == [3]
    html = run["out"] / "report.html"
    proc = subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", "report", *run["dirs"], "-o", str(html)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = html.read_text(encoding="utf-8")
    assert "rank 3 (straggler)" in text and "no trace of rank" not in text
