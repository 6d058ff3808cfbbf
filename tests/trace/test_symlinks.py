"""Runs gathered with symbolic links (clusters link runs and windows from scratch disks): a link to a directory is
followed, each directory read once; a loop, a second link to a directory or a trace already read, and a link to
nothing are left out and named in the result's warnings (one line each on the command line)."""

import os

import pytest
from tracebuilder import TraceBuilder

from lightning_streamprof.api import analyze, analyze_runs, find_traces
from lightning_streamprof.cli import main
from lightning_streamprof.trace import TraceFormatError


def _trace(path, rank=0, step=0):
    """A trace of ``rank`` at ``path`` (its directories made) with one step, numbered ``step``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    b = TraceBuilder(rank=rank)
    b.step(step, 0, 100)
    b.op("aten::mm", 5, 50)
    return b.write(path)


def _run(directory, windows=(0,)):
    """A profiler-shaped run: ``w<window>-step<step>/rank0.1.pt.trace.json.gz`` for each window."""
    for w in windows:
        _trace(os.path.join(directory, f"w{w:03d}-step{10 * w:07d}", "rank0.1.pt.trace.json.gz"), step=10 * w)
    return directory


def _windows(run):
    return [w.window for w in run.windows]


def test_a_symlinked_window_is_read(tmp_path):
    run = _run(tmp_path / "fit-a")
    scratch = _run(tmp_path / "scratch", windows=(1,))
    os.symlink(scratch / "w001-step0000010", run / "w001-step0000010")
    (found,) = analyze_runs(run)
    assert _windows(found) == [0, 1]  # was: window 0 only
    assert found.merged.warnings == []


def test_a_symlinked_run_among_runs_is_read(tmp_path):
    runs = tmp_path / "runs"
    _run(runs / "fit-a")
    os.symlink(_run(tmp_path / "scratch" / "fit-b", windows=(0, 1)), runs / "fit-b")
    found = {r.run: _windows(r) for r in analyze_runs(runs)}
    assert found == {"fit-a": [0], "fit-b": [0, 1]}  # was: fit-a only


def test_a_folder_of_only_symlinked_runs(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("fit-a", "fit-b"):
        os.symlink(_run(tmp_path / "scratch" / name), runs / name)
    assert sorted(r.run for r in analyze_runs(runs)) == ["fit-a", "fit-b"]  # was: "holds no Kineto trace"
    assert analyze(runs, run="fit-b").steps.count == 1


def test_a_loop_is_named_and_not_followed(tmp_path, capsys):
    run = _run(tmp_path / "fit-a", windows=(0, 1))
    loop = run / "w000-step0000000" / "loop"
    os.symlink("..", loop)
    (found,) = analyze_runs(run)
    assert _windows(found) == [0, 1] and len(found.merged.traces) == 2
    assert found.merged.warnings == [f"{loop}: skipped: a link to .., which holds it: a loop, not followed"]
    assert main(["analyze", str(run)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"streamprof: warning: {loop}: skipped: a link to .., which holds it: a loop, not followed"]


def test_a_second_link_to_a_directory_is_named(tmp_path):
    runs = tmp_path / "runs"
    scratch = _run(tmp_path / "scratch" / "fit-x")
    runs.mkdir()
    os.symlink(scratch, runs / "fit-a")
    os.symlink(scratch, runs / "fit-b")
    _run(runs / "fit-c")
    os.symlink(runs / "fit-c", runs / "alias")  # sorts first, yet the real directory keeps its name
    found = analyze_runs(runs)
    assert sorted(r.run for r in found) == ["fit-a", "fit-c"]
    warnings = {w for r in found for w in r.merged.warnings}
    assert warnings == {
        f"{runs / 'fit-b'}: skipped: a link to {scratch}, the directory {runs / 'fit-a'}, already read: "
        "not followed again",
        f"{runs / 'alias'}: skipped: a link to {runs / 'fit-c'}, the directory {runs / 'fit-c'}, already read: "
        "not followed again",
    }


def test_symlinked_traces_are_read_once(tmp_path):
    run = _run(tmp_path / "fit-a")
    window = run / "w000-step0000000"
    os.symlink(_trace(tmp_path / "scratch" / "rank1.1.pt.trace.json.gz", rank=1), window / "rank1.1.pt.trace.json.gz")
    os.symlink(window / "rank0.1.pt.trace.json.gz", window / "rank0.2.pt.trace.json.gz")  # the same trace again
    (found,) = analyze_runs(run)
    assert sorted(t.rank for t in found.merged.traces) == [0, 1]  # was: rank 0 read twice
    assert found.merged.warnings == [
        f"{window / 'rank0.2.pt.trace.json.gz'}: skipped: a link to {window / 'rank0.1.pt.trace.json.gz'}, "
        f"the trace {window / 'rank0.1.pt.trace.json.gz'}, already read"]


def test_a_dangling_link_is_named(tmp_path):
    run = _run(tmp_path / "fit-a")
    os.symlink(tmp_path / "gone", run / "w001-step0000010")
    (found,) = analyze_runs(run)
    assert _windows(found) == [0]
    (warning,) = found.merged.warnings  # was: nothing said
    assert warning.startswith(f"{run / 'w001-step0000010'}: skipped: a link to {tmp_path / 'gone'}, which cannot be "
                              "followed (No such file or directory")
    skipped = []
    assert find_traces(str(run), skipped) == ([str(run / "w000-step0000000" / "rank0.1.pt.trace.json.gz")], str(run))
    assert skipped == [warning]


def test_a_folder_of_dangling_links_names_them(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    os.symlink(tmp_path / "gone", runs / "fit-a")
    with pytest.raises(TraceFormatError) as err:
        analyze_runs(runs)
    assert "holds no Kineto trace" in str(err.value) and f"left out: {runs / 'fit-a'}: a link to" in str(err.value)
