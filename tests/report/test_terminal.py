"""Terminal output: ms with unit headers in words, no empty columns, one recommendation per kind with each
trace's evidence, paths whole on their own lines, a progress bar only where it helps."""

import io
import os

import msgspec
from reports import MEMORY_STACK
from tracebuilder import TraceBuilder

from lightning_streamprof.api import analyze, analyze_runs
from lightning_streamprof.report.markdown import window_markdown
from lightning_streamprof.report.progress import reading, wants_bar
from lightning_streamprof.report.summary import moved_note, render_windows
from lightning_streamprof.report.text import render_analysis


def test_units_in_words_and_no_empty_columns():
    text = render_analysis(analyze(MEMORY_STACK))
    assert "host self (ms)" in text and "total (ms)" in text and "µs" not in text
    assert "_ns" not in text and "input_shapes" not in text and "input shapes" not in text
    cpu = TraceBuilder()
    cpu.step(1, 0, 100)
    cpu.op("aten::mm", 10, 50)
    path = cpu.write(os.path.join(os.environ.get("TMPDIR", "/tmp"), "cpu_only.pt.trace.json.gz"))
    cpu_text = render_analysis(analyze(path))
    assert "aten::mm" in cpu_text and "device self (ms)" not in cpu_text  # no device work: no device columns


def _windows(tmp_path, count):
    """``count`` windows of one run, each one step whose DataLoader (single process) takes 30 of 100 µs."""
    for w in range(count):
        b = TraceBuilder()
        b.meta["streamprof"] = {"run": "fit-1", "window": w, "first_step": 10 * w}
        b.step(10 * w, 0, 100)
        b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1, 30)
        d = tmp_path / "fit-1" / f"w{w:03d}-step{10 * w:07d}"
        d.mkdir(parents=True)
        b.write(d / "rank0.1.pt.trace.json.gz")
    return analyze_runs(tmp_path)


def test_one_recommendation_per_kind_with_each_traces_evidence(tmp_path):
    (run,) = _windows(tmp_path, 3)
    text = render_analysis(run.merged, windows=run.windows)
    assert text.count("[dataloader]") == 1
    for w in range(3):
        assert f"window {w} (step {10 * w}), rank 0: waits 0.03 ms of a 0.10 ms step for data (30.0%; 30.0% in the " \
               "median step)" in text


def test_paths_are_never_wrapped(tmp_path):
    (run,) = _windows(tmp_path / ("a-very-long-directory-name-" * 6), 1)
    result = run.windows[0].ranks[0]

    class Exported:
        window, first_step, last_step = 0, 0, 0
        path = result.traces[0].path
        analysis = result

    text = render_windows([Exported()], run=run, footer=["Next:", f"  streamprof analyze {Exported.path}"])
    assert len(Exported.path) > 120
    assert f"  {Exported.path}" in text.splitlines()
    assert f"  streamprof analyze {Exported.path}" in text.splitlines()


def test_moved_window_is_said():
    assert moved_note(1, 42, 32) == ("window 1 was moved by the overhead budget (max_overhead) from step 32 to step "
                                     "42, so that profiling stays within its share of the training time")
    assert moved_note(1, 42, None) is None and moved_note(1, 42, 42) is None


def test_markdown_summary():
    result = analyze(MEMORY_STACK)
    path = "s3://b/run/w001/rank0.pt.trace.json.gz"
    text = window_markdown(result, 1, 42, 44, moved=moved_note(1, 42, 32), path=path)
    assert text.startswith("**StreamProfiler window 1**: steps 42-44")
    assert "moved by the overhead budget" in text and "`s3://b/run/w001/rank0.pt.trace.json.gz`" in text
    assert "| cuda:0 | 4.2% |" in text and "| kernel |" in text and "`host_bound`" in text
    piped = msgspec.structs.replace(result, operators=[msgspec.structs.replace(result.operators[0], name="a|b<c>")])
    assert "| `a|b<c>` |" in window_markdown(piped, 0, 0, 1)  # a code span: no HTML, no column break


def test_progress_bar_only_on_a_terminal_for_urls_or_many_traces(tmp_path):
    assert wants_bar("s3://bucket/run", 1) and wants_bar("/local/dir", 3) and not wants_bar("/local/file", 1)
    shown = io.StringIO()
    with reading(str(tmp_path), stream=shown, force=True) as progress:
        for i in range(4):
            progress(i, 4, f"/x/rank{i}.pt.trace.json.gz")
    assert "reading traces" in shown.getvalue()
    hidden = io.StringIO()
    with reading(str(tmp_path), stream=hidden, force=False) as progress:
        progress(0, 4, "/x/rank0.pt.trace.json.gz")
    assert hidden.getvalue() == ""
