from helpers import fit
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_streamprof import StreamProfiler


def test_windows_are_analysed_and_logged_to_tensorboard(tmp_path):
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=2, every=10, max_overhead=None)
    fit(prof, tmp_path, max_steps=30, logger=logger)
    windows = prof.windows
    assert len(windows) == 3 and all(w.analysis is not None for w in windows)
    assert windows[0].analysis.steps.count == 2
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"streamprof/step_ms", "streamprof/step_ms/cpu_exec", "streamprof/step_ms/other"} <= tags
    assert len(events.Scalars("streamprof/step_ms")) == 3
    summary = prof.summary()
    assert "step " in summary and "cpu_exec" in summary
