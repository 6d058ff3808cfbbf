import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def run(mode, tmp_path, epochs=2):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    out = tmp_path / f"{mode}{epochs}"
    out.mkdir()
    proc = subprocess.run([sys.executable, os.path.join(HERE, "ddp_pipeline_program.py"), mode, str(out), str(epochs)],
                          capture_output=True, text=True, timeout=400, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(f.read_text()) for f in sorted(out.glob("rank*.json"))]
    return {r["rank"]: r for r in results}


@pytest.mark.parametrize("mode", ["on", "thread"])
def test_ddp_gloo_pipelined_equals_serial(mode, tmp_path):
    serial, piped = run("off", tmp_path), run(mode, tmp_path)
    assert set(serial) == set(piped) == {0, 1}
    for rank in (0, 1):
        assert piped[rank]["seen"] == serial[rank]["seen"]
        assert piped[rank]["losses"] == pytest.approx(serial[rank]["losses"], rel=1e-6, abs=1e-7)
        assert piped[rank]["weights"] == pytest.approx(serial[rank]["weights"], abs=1e-6)
        assert piped[rank]["steps"] == serial[rank]["steps"]
        assert piped[rank]["staged"] > 0
    assert piped[0]["weights"] == pytest.approx(piped[1]["weights"], abs=1e-6)  # gradients were all-reduced


def test_ddp_gloo_auto_decides_alike_on_every_rank(tmp_path):
    """auto's trial times are averaged over the ranks before each decision: both ranks see the same numbers and
    make the same choice (one rank choosing alone could otherwise diverge), and training equals serial."""
    serial, auto = run("off", tmp_path, epochs=16), run("auto", tmp_path, epochs=16)  # 96 steps: a round
    decisions = [auto[rank]["auto"] for rank in (0, 1)]
    assert len(decisions[0]) >= 1 and decisions[0] == decisions[1]
    assert set(decisions[0][0]["ms"]) == {"serial", "inline"}
    for rank in (0, 1):
        assert auto[rank]["seen"] == serial[rank]["seen"]
        assert auto[rank]["losses"] == pytest.approx(serial[rank]["losses"], rel=1e-6, abs=1e-7)
        assert auto[rank]["steps"] == serial[rank]["steps"]
