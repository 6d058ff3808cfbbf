import os

from logdirs import RUN, make_run, write_report

from lightning_streamprof.tensorboard_plugin.runs import RunIndex, find_runs


def test_a_run_in_lightning_logs_is_found_with_its_windows_and_ranks(tmp_path):
    make_run(tmp_path, ranks=(0, 1))
    (run,) = find_runs(str(tmp_path))
    assert run.id == f"version_0/streamprof/{RUN}"
    assert (run.stage, run.started, run.report) == ("fit", "2026-12-03 10:15:00", True)
    assert [(w.window, w.first_step) for w in run.windows] == [(0, 3), (1, 11)]
    assert run.ranks == [0, 1]
    assert sorted(run.files()) == sorted(f"w{w:03d}-step{s:07d}/rank{r}.17962935{w}{r}.pt.trace.json.gz"
                                         for w, s in ((0, 3), (1, 11)) for r in (0, 1))
    listed = run.to_json()
    assert (listed["name"], listed["where"]) == (RUN, "version_0/streamprof")
    assert listed["windows"][0]["traces"][0]["bytes"] > 0


def test_runs_without_a_report_or_without_windows_are_still_runs(tmp_path):
    make_run(tmp_path, where="a", report=False)
    make_run(tmp_path, where="b", windows=())
    assert {(r.id.split("/")[0], r.report, len(r.windows)) for r in find_runs(str(tmp_path))} == {
        ("a", False, 2), ("b", True, 0)}


def test_other_folders_and_other_html_are_not_runs(tmp_path):
    (tmp_path / "version_0").mkdir()
    (tmp_path / "version_0" / "events.out.tfevents.1.host").write_bytes(b"")
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "report.html").write_text("<html><title>someone else's report</title></html>")
    (other / "w000-step0000001").mkdir()
    (other / "w000-step0000001" / "notes.txt").write_text("not a trace")
    hidden = tmp_path / ".cache" / "run"
    hidden.mkdir(parents=True)
    write_report(str(hidden))
    assert find_runs(str(tmp_path)) == []


def test_a_report_or_trace_linked_from_outside_the_logdir_is_not_listed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("<title>streamprof report: not yours</title>")
    logdir = tmp_path / "logs"
    run_dir = make_run(logdir, report=False, windows=((0, 3),))
    os.symlink(secret, os.path.join(run_dir, "report.html"))
    os.symlink(secret, os.path.join(run_dir, "w000-step0000003", "rank1.5.pt.trace.json.gz"))
    (run,) = find_runs(str(logdir))
    assert run.report is False
    assert run.ranks == [0]


def test_the_latest_run_comes_first(tmp_path):
    old = make_run(tmp_path, name="fit-20261203-090000.000-000001")
    make_run(tmp_path, name="validate-20261203-100000.000-000002")
    os.utime(os.path.join(old, "report.html"), (1, 1))
    assert [r.stage for r in find_runs(str(tmp_path))] == ["validate", "fit"]


def test_the_index_finds_a_run_written_after_its_last_look(tmp_path):
    index = RunIndex(str(tmp_path), ttl=3600)
    assert index.runs() == []
    make_run(tmp_path)
    assert index.runs() == []  # still cached
    assert index.get(f"version_0/streamprof/{RUN}").report
    assert index.get("../version_0") is None


def test_a_logdir_that_is_itself_a_run(tmp_path):
    run_dir = make_run(tmp_path, where="streamprof")
    (run,) = find_runs(run_dir)
    assert (run.id, run.to_json()["where"], len(run.windows)) == (RUN, "", 2)
