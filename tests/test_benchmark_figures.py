"""The benchmarks as a package: the README's marked figures match their result files, the results index is what the
files give, every result lies in its suite's folder, ``python -m benchmarks --list`` names every suite, and the GPU
runner reads its sets, kills a run at its time-out and stops in one line when a small dependency is missing."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import figures, gpu, index  # noqa: E402
from benchmarks.suites import RESULTS, SUITES, suite_of  # noqa: E402


def test_every_marked_figure_matches_its_result_file():
    found, problems = figures.check()
    assert problems == []
    assert len(found) >= 20  # a rewrite of the README keeps the markers


def test_a_figure_that_its_file_does_not_give_is_named(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("ours <!-- fig hook-cost/hook_cost-cpu-scopes-20261201.md#µs per step@config=streamprof -->6.9"
                   "<!-- /fig --> µs, <!-- fig hook-cost/nothing.md#x@y=z -->1<!-- /fig -->\n")
    found, problems = figures.check((doc,))
    assert len(found) == 1 and len(problems) == 2
    assert "the file gives 6.650" in problems[0] and "FileNotFoundError" in problems[1]


def test_json_selectors_pick_fields_items_and_factors():
    data = {"rows": [{"workload": "a", "vs": {"auto": 1.2345}}, {"workload": "b", "vs": {"auto": 0.5}}]}
    assert figures.from_json(data, "rows[workload=b].vs.auto") == 0.5
    assert figures.from_json(data, "rows[0].vs.auto*100") == pytest.approx(123.45)
    assert figures.number("2,000-step") == (2000.0, 0) and figures.number("0.930-1.160") == (0.93, 3)


def test_the_results_index_and_the_guide_s_tables_are_what_their_sources_give():
    assert index.main(["--check"]) == 0, "python -m benchmarks index"


def test_every_result_lies_in_its_suite_s_folder():
    loose = [n for n in os.listdir(RESULTS) if n not in ("README.md", "INDEX.md", ".gitkeep")
             and not os.path.isdir(os.path.join(RESULTS, n))]
    assert loose == []
    for folder in (p for p in RESULTS.iterdir() if p.is_dir()):
        assert {suite_of(f.name).name for f in folder.iterdir()} == {folder.name}


def test_the_list_names_every_suite_and_its_command():
    out = subprocess.run([sys.executable, "-m", "benchmarks", "--list"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert all(f"python -m benchmarks {s.name} " in out.stdout for s in SUITES if s.script)
    assert all(os.path.exists(os.path.join(ROOT, "benchmarks", s.script)) for s in SUITES if s.script)


def test_the_gpu_runner_reads_pipeline_sets_and_suite_runs(tmp_path):
    seconds, cmd = gpu.pipeline_run("article:8,resnet50:32@serial,on,auto@1000@h200-a@280@--devices 2", 5, tmp_path)
    assert seconds == 280
    assert cmd[1:] == ["-m", "benchmarks", "pipeline-speed", "--workloads", "article:8,resnet50:32", "--configs",
                       "serial,on,auto", "--steps", "1000", "--rounds", "5", "--tag", "h200-a", "--out",
                       str(tmp_path), "--devices", "2"]
    _, cmd = gpu.pipeline_run("vit:64:bf16@on,auto@1000@h200-b@300@--rounds 10", 5, tmp_path)
    assert cmd.count("--rounds") == 1 and cmd[-2:] == ["--rounds", "10"]
    seconds, cmd = gpu.suite_run("60 hook-cost --out {out}", tmp_path)
    assert seconds == 60 and cmd[3:] == ["hook-cost", "--out", str(tmp_path)]
    with pytest.raises(gpu.Stop):
        gpu.pipeline_run("article:8@serial@1000", 5, tmp_path)


def test_a_run_past_its_time_is_killed_with_its_children(tmp_path):
    log = tmp_path / "runs.log"
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
            "print('started', flush=True); time.sleep(60)"
    rc = gpu.run_logged([sys.executable, "-c", child], dict(os.environ), 3, log)
    assert rc == 124
    assert "started" in log.read_text() and log.read_text().endswith("exit 124\n")


def test_the_runner_log_keeps_no_path_of_the_machine(tmp_path):
    log = tmp_path / "runs.log"
    child = (f"import os, lightning; print(lightning.__file__); print({str(tmp_path)!r} + '/x.json'); "
             "print(os.getcwd() + '/tests/helpers.py:45')")  # the runner runs in the checkout
    assert gpu.run_logged([sys.executable, "-c", child], dict(os.environ), 60, log, quiet=False) == 0
    text = log.read_text()
    assert text.startswith("$ python -c ")
    assert "site-packages/lightning/__init__.py" in text and "$OUT/x.json" in text and "\ntests/helpers.py:45" in text
    assert sys.executable not in text and str(tmp_path) not in text and str(gpu.ROOT) not in text


def test_the_runner_stops_in_one_line_when_a_small_dependency_is_missing(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu, "_pip", lambda args, env: None)
    monkeypatch.setattr(gpu, "SMALL_DEPENDENCIES", ("json", "no_such_module_for_streamprof"))
    assert gpu.main(["--out", str(tmp_path), "--no-tests"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_module_for_streamprof is missing" in err[0] and ".whl/" in err[0]


def test_results_record_the_suite_command(tmp_path):
    """A result written through the entry point records ``python -m benchmarks SUITE`` and the code version."""
    out = subprocess.run([sys.executable, "-m", "benchmarks", "distributed-scoring", "--ranks", "8", "--repeat", "1",
                          "--tag", "t", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    meta = json.loads(next(tmp_path.glob("distributed_scoring-t-*.json")).read_text())
    assert meta["command"] == "python -m benchmarks distributed-scoring --ranks 8 --repeat 1 --tag t"
    assert meta["code"]


def test_the_runs_spread_over_the_gpus_and_stop_at_the_time_limit(tmp_path):
    log = tmp_path / "runs.log"
    show = [sys.executable, "-c", "import os, time; time.sleep(2); print('gpu', os.environ['CUDA_VISIBLE_DEVICES'])"]
    runs = [(30, show), (30, show)]
    done = gpu.run_all(runs, dict(os.environ), ["0", "1"], gpu.time.monotonic() + 120, log)
    assert [rc for _, rc in done] == [0, 0]
    assert sorted(line for line in log.read_text().splitlines() if line.startswith("gpu")) == ["gpu 0", "gpu 1"]
    late = gpu.run_all(runs[:1], dict(os.environ), [], gpu.time.monotonic() + gpu.MIN_SECONDS / 2, log)
    assert late == [(show, None)]
