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
    assert lines[-4:] == ["Next:", f"  {streamprof} analyze {run_dir}",
                          f"  {streamprof} report {run_dir} -o report.html", f"  {tensorboard} --logdir {logger.root_dir}"]
    assert f"  {windows[0].path}" in lines
    events = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0})
    events.Reload()
    texts = events.Tensors("streamprof/summary/text_summary")
    assert [t.step for t in texts] == [w.global_step for w in windows]
    second = texts[1].tensor_proto.string_val[0].decode()
    assert second.startswith("**StreamProfiler window 1**: steps 24-25") and "moved by the overhead budget" in second
