"""At the end of fit the profiler leaves one HTML report beside the traces, says where it is and what to run
next, writes a markdown summary per window to TensorBoard, and says when the overhead budget moved a window."""

import os

from helpers import fit
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_streamprof import StreamProfiler, names
from lightning_streamprof.profiling.run_report import command
from lightning_streamprof.profiling.schedule import OverheadBudget


def test_report_summary_and_tensorboard_text(tmp_path, monkeypatch):
    calls = iter([10, 0, 0, 0, 0])  # the budget moves the second window by 10 steps
    monkeypatch.setattr(OverheadBudget, "defer_steps", lambda self, elapsed: next(calls, 0))
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=2, every=10, max_overhead=None)
    fit(prof, tmp_path, max_steps=40, logger=logger)
    windows = prof.windows
    assert [w.first_step for w in windows] == [4, 24, 34]  # the second planned at 14, moved to 24
    run_dir = os.path.dirname(os.path.dirname(windows[0].path))
    report = os.path.join(run_dir, names.REPORT_FILE)
    html = open(report).read()
    assert 'id="breakdown"' in html and "window 1 was moved by the overhead budget" in html
    summary = prof.summary()
    lines = summary.splitlines()
    assert "  window 1 was moved by the overhead budget (max_overhead) from step 14 to step 24, so that profiling " \
           "stays within its share of the training time" in lines
    assert f"HTML report (open it in a browser): {report}" in lines
    streamprof, tensorboard = command("streamprof"), command("tensorboard")
    # the report is written already: no command that would make a poorer one from the traces alone
    assert lines[-3:] == ["Next:", f"  {streamprof} analyze {run_dir}", f"  {tensorboard} --logdir {logger.root_dir}"]
    assert f"  {windows[0].path}" in lines
    events = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0})
    events.Reload()
    texts = events.Tensors("streamprof/summary/text_summary")
    assert [t.step for t in texts] == [w.global_step for w in windows]
    second = texts[1].tensor_proto.string_val[0].decode()
    assert second.startswith("**StreamProfiler window 1**: steps 24-25") and "moved by the overhead budget" in second


def test_other_ranks_added_from_beside_and_missing_ones_named(tmp_path):
    """Rank 0's report takes the other ranks' traces of its windows from the same directories; a rank whose
    trace is not there is named in one note (another host's disk), and the report still holds rank 0's."""
    import shutil

    from lightning_streamprof.profiling.run_results import run_results, with_other_ranks

    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=2, every=10, max_overhead=None)
    fit(prof, tmp_path, max_steps=26)
    results = prof.windows
    run = run_results(results, os.path.basename(os.path.dirname(os.path.dirname(results[0].path))))
    assert [w.window for w in run.windows] == [0, 1, 2]
    # window 1's directory also holds a trace of rank 1 (a copy of rank 0's, relabelled as rank 1 by its name and
    # distributedInfo); windows 0 and 2 hold rank 0's only
    import gzip
    import json

    src = results[1].path
    doc = json.loads(gzip.decompress(open(src, "rb").read()))
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": 1, "world_size": 2}
    with gzip.open(os.path.join(os.path.dirname(src), "rank1.123.pt.trace.json.gz"), "wt") as f:
        json.dump(doc, f)
    shutil.copy(src, os.path.join(os.path.dirname(src), "notes.txt"))  # not a trace: ignored
    both, notes = with_other_ranks(run, results, world_size=2, seconds=60)
    assert [[r.traces[0].rank for r in w.ranks] for w in both.windows] == [[0], [0, 1], [0]]
    assert len(both.merged.traces) == 4 and len(notes) == 1
    assert "window 0: rank(s) 1; window 2: rank(s) 1" in notes[0]
    html_path = os.path.join(os.path.dirname(os.path.dirname(src)), names.REPORT_FILE)
    assert os.path.exists(html_path)
