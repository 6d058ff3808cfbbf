"""In a 2-rank gloo run every rank records the window rank 0 decides on, at the same steps: a signal to rank 0, and a
slowdown of rank 1 (which rank 0's steps wait for), the slow rank named the straggler of that window."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from ddp_requests_program import ASK_AT, SLOW_FROM  # noqa: E402

POLL_STEPS = 100


def run(tmp_path, mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run([sys.executable, os.path.join(HERE, "ddp_requests_program.py"), str(tmp_path), mode],
                          capture_output=True, text=True, timeout=500, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return {r["rank"]: r for r in results}


@pytest.mark.parametrize("mode", ["signal", "slowdown"])
def test_every_rank_records_rank_0s_window_at_the_same_steps(tmp_path, mode):
    ranks = run(tmp_path, mode)
    assert set(ranks) == {0, 1}
    off = {r: [w for w in ranks[r]["windows"] if w["reason"] in ("request", "slowdown")] for r in (0, 1)}
    assert off[0] and off[0] == off[1]  # the same windows, steps and reasons on both ranks
    first = off[0][0]
    if mode == "signal":
        assert first["via"] == "signal"
        assert first["first_step"] == (ASK_AT // POLL_STEPS + 1) * POLL_STEPS + 1  # the next agreement, warm-up 1
        assert "was recorded on request (by signal" in ranks[0]["summary"]
    else:
        assert first["reason"] == "slowdown" and SLOW_FROM < first["first_step"] <= SLOW_FROM + 2 * POLL_STEPS
        assert "was recorded because the step time rose from" in ranks[0]["summary"]
        assert ranks[0]["stragglers"][str(first["first_step"])] == [1]  # the slow window's straggler
