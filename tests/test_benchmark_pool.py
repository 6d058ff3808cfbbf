"""``python -m benchmarks pool``: auto's per-round ratios pooled over results, and its mark and floor, on
hand-made rates."""

import json

import pytest

from benchmarks import pool


def _result(tmp_path, name, rates, code="abc1234", **extra):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"benchmark": "pipeline_runs", "code": code, **extra,
                                "rows": [{"workload": "w:8", "rank": 0, "rates": rates}]}))
    return path


def test_ratios_are_taken_within_each_round_and_pooled_across_files(tmp_path):
    a = _result(tmp_path, "a", {"serial": [100.0, 50.0], "on": [200.0, 100.0], "auto": [190.0, 100.0]},
                args={"steps": 1000}, device="NVIDIA H200")
    b = _result(tmp_path, "b", {"on": [10.0], "auto": [9.0]})
    assert pool.main([str(a), str(b), "--tag", "t", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "pipeline_pool-t.json").read_text())["workloads"]["w:8"]
    assert out["ratios"]["serial"] == pytest.approx([1.9, 2.0])
    assert out["ratios"]["on"] == pytest.approx([0.95, 1.0, 0.9])
    assert out["x_on"] == pytest.approx(0.95) and out["x_better"] == pytest.approx(0.95)
    assert out["meets_mark"] is False and out["above_floor"] is True  # 0.95 < 0.97; no round below serial
    alone = _result(tmp_path, "alone", {"on": [100.0, 100.0], "auto": [99.0, 101.0]})
    assert pool.main([str(alone), "--tag", "u", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "pipeline_pool-u.json").read_text())["workloads"]["w:8"]["above_floor"] is None
    assert "| met (on only) | - |" in (tmp_path / "pipeline_pool-u.md").read_text()  # no serial round: no floor
    text = (tmp_path / "pipeline_pool-t.md").read_text()
    assert "| w:8 | 2/3 | 1.950 |" in text and "| 0.950 | 0.900-1.000 | - | missed |" in text  # no trial share
    assert "- w:8: a (abc1234, 1000 steps, NVIDIA H200), b (abc1234)" in text  # what each source's rounds are


def test_a_round_below_the_floor_breaks_it(tmp_path):
    a = _result(tmp_path, "a", {"serial": [100.0, 100.0, 100.0], "on": [100.0, 100.0, 100.0],
                                "auto": [101.0, 99.0, 94.0]})
    assert pool.main([str(a), "--tag", "t", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "pipeline_pool-t.json").read_text())["workloads"]["w:8"]
    assert out["meets_mark"] is True and out["lowest_x_serial"] == pytest.approx(0.94)
    assert out["above_floor"] is False


def test_a_file_that_is_no_pipeline_result_is_named_with_exit_1(tmp_path, capsys):
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"benchmark": "hook_cost"}))
    assert pool.main([str(bad), "--tag", "t", "--out", str(tmp_path)]) == 1
    assert f"{bad}: not a pipeline_runs result" in capsys.readouterr().err


def test_the_trials_cost_measured_inside_each_run_is_pooled_as_a_median(tmp_path):
    a = _result(tmp_path, "a", {"on": [100.0, 100.0], "auto": [99.0, 98.0]})
    data = json.loads(a.read_text())
    data["rows"][0]["trial_share_per_round"] = {"auto": [0.01, None]}
    a.write_text(json.dumps(data))
    b = _result(tmp_path, "b", {"on": [100.0], "auto": [97.0]})
    data = json.loads(b.read_text())
    data["rows"][0]["trial_share_per_round"] = {"auto": [0.03]}
    b.write_text(json.dumps(data))
    assert pool.main([str(a), str(b), "--tag", "t", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "pipeline_pool-t.json").read_text())["workloads"]["w:8"]
    assert out["trial_share"] == pytest.approx(0.02)  # a run without trials (None) is left out, not taken as 0
    assert "| 2.00% |" in (tmp_path / "pipeline_pool-t.md").read_text()


def test_the_way_each_run_ended_on_is_counted(tmp_path):
    a = _result(tmp_path, "a", {"serial": [100.0, 100.0, 100.0], "auto": [110.0, 99.0, 100.0]})
    data = json.loads(a.read_text())
    first = {"step": 40, "reason": "first", "steps": 30}
    data["rows"][0]["auto_rounds_per_round"] = {"auto": [
        [{**first, "choice": "thread+graph"}],
        [{**first, "choice": "thread+graph"}, {**first, "step": 1040, "reason": "watch", "choice": "serial"}],
        []]}  # the third run ended before auto chose
    a.write_text(json.dumps(data))
    old = _result(tmp_path, "old", {"serial": [100.0], "auto": [100.0]})  # written before the rounds were kept
    assert pool.main([str(a), "--tag", "t", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "pipeline_pool-t.json").read_text())["workloads"]["w:8"]
    assert out["ways"] == {"none": 1, "serial": 1, "thread+graph": 1}
    assert "| held | none x1, serial x1, thread+graph x1 |" in (tmp_path / "pipeline_pool-t.md").read_text()
    assert pool.main([str(old), "--tag", "o", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "pipeline_pool-o.json").read_text())["workloads"]["w:8"]["ways"] is None
    assert "| held | - |" in (tmp_path / "pipeline_pool-o.md").read_text()


def test_a_quoted_glob_is_expanded_to_its_files(tmp_path):
    _result(tmp_path, "a-r3", {"on": [100.0], "auto": [99.0]})
    _result(tmp_path, "b-r3", {"on": [100.0], "auto": [101.0]})
    _result(tmp_path, "c-r2", {"on": [100.0], "auto": [50.0]})
    assert pool.main([str(tmp_path / "*-r3.json"), "--tag", "g", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "pipeline_pool-g.json").read_text())["workloads"]["w:8"]
    assert out["ratios"]["on"] == pytest.approx([0.99, 1.01])  # c-r2 left out, each of the others read once
