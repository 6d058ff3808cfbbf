"""The pipeline-speed benchmark run end to end on the CPU: each run says where its wall time went, so that a set's
cost on the device can be planned from what it times."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_each_run_reports_where_its_seconds_went(tmp_path):
    cmd = [sys.executable, "-m", "benchmarks", "pipeline-speed", "--accelerator", "cpu", "--workloads", "article:2",
           "--configs", "serial,auto", "--steps", "14", "--rounds", "2", "--workers", "0", "--image-size", "64",
           "--out", str(tmp_path), "--tag", "t"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads((tmp_path / "pipeline_runs-t.json").read_text())["rows"][0]
    assert row["rounds"] == 2
    for config in ("serial", "auto"):
        seconds = row["seconds_per_run"][config]
        assert all(seconds[k] > 0 for k in ("setup", "early", "timed", "end"))
        assert seconds["timed"] < seconds["whole"] and seconds["early"] < seconds["whole"]
        # the rate is read from the timed part alone: 4 steps (10 to 14) in it
        assert 4 / seconds["timed"] == pytest.approx(row["median"][config], rel=0.5)
    assert "article:2 round 1 serial:" in done.stdout and "timed" in done.stdout
    assert "Seconds per run" in (tmp_path / "pipeline_runs-t.md").read_text()
