"""``benchmarks/mark_power.py``: the host's round-to-round spread read from rounds where auto ran mode="on"'s way,
and the chances that a set of k rounds meets the mark and keeps the floor, on hand-made rounds and noise."""

import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from mark_power import chance_of_floor, chance_of_mark, main, residuals, spread  # noqa: E402


def _row(workload, auto, on, ended):
    return {"workload": workload, "rank": 0, "rates": {"auto": auto, "on": on},
            "auto_rounds_per_round": {"auto": [[{"choice": c}] if c else [] for c in ended]}}


def test_only_rounds_that_ended_on_a_pipelined_way_beside_on_are_read():
    result = {"benchmark": "pipeline_runs", "rows": [
        _row("w:8", [99.0, 110.0, 90.0, 100.0, 50.0], [100.0, 100.0, 100.0, 100.0, 100.0],
             ["thread+graph", "thread+graph", "thread+graph", "serial", None]),
        _row("few:8", [100.0, 100.0], [100.0, 100.0], ["thread", "thread"])]}  # fewer than 3 rounds: left out
    noise = residuals([result])
    assert list(noise) == ["w:8"]
    logs = np.log([0.99, 1.1, 0.9])
    assert noise["w:8"] == pytest.approx(logs - np.median(logs))  # serial's and the unchosen run's rounds left out


def test_chances_follow_the_noise():
    rng = np.random.default_rng(0)
    none = np.zeros(4)
    assert chance_of_mark(none, 0.99, 5, 0.97, 100, rng) == 1.0
    assert chance_of_mark(none, 0.96, 5, 0.97, 100, rng) == 0.0
    two = np.log([0.9, 1.1])  # half the rounds 10% slow
    assert chance_of_mark(two, 1.0, 1, 0.97, 40_000, rng) == pytest.approx(0.5, abs=0.02)
    assert chance_of_floor(two, 1.0, 3, 0.95, 40_000, rng) == pytest.approx(0.5 ** 3, abs=0.02)
    assert chance_of_floor(two, 1.1, 3, 0.95, 1_000, rng) == 1.0  # 0.99x serial at worst
    assert spread(np.log([0.95, 1.0, 1.05])) == pytest.approx(1.4826 * np.log(1.05), rel=0.01)


def test_the_command_writes_its_tables_and_names_a_bad_file(tmp_path, capsys):
    good = tmp_path / "runs.json"
    good.write_text(json.dumps({"benchmark": "pipeline_runs", "rows": [
        _row("w:8", [95.0, 100.0, 105.0, 98.0], [100.0] * 4, ["thread"] * 4)]}))
    assert main([str(good), "--tag", "t", "--draws", "500", "--workloads", "2", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "mark_power-t.md").read_text()
    assert "| rounds | mark met, true 0.99x on | all 2 met, 0.99x |" in text and "| w:8 | 4 |" in text
    data = json.loads((tmp_path / "mark_power-t.json").read_text())
    first = data["rows"][0]
    assert first["rounds"] == 5 and first["mark_all_99"] == pytest.approx(first["mark_99"] ** 2)
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"benchmark": "hook_cost"}))
    assert main([str(bad), "--tag", "t", "--out", str(tmp_path)]) == 1
    assert f"{bad}: not a pipeline_runs result" in capsys.readouterr().err
