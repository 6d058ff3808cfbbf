"""What profiling cost is stated where the user reads it (the end-of-fit summary, the HTML report, TensorBoard's
``streamprof/overhead``) as a fraction of the training time with how it was measured; the analysis worker starts
before the first step, at a low priority with one thread per numerical library."""

import os
import re
import time

import pytest
from helpers import fit
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_streamprof import StreamProfiler, names
from lightning_streamprof.profiling import worker
from lightning_streamprof.profiling.loggers import OVERHEAD_TAG
from lightning_streamprof.report.cost import HOW_MEASURED, cost_headline, cost_sentence
from lightning_streamprof.results import ProfilingCost


def test_the_cost_is_stated_in_the_summary_the_report_and_tensorboard(tmp_path):
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=2, every=10, max_overhead=None)
    fit(prof, tmp_path, max_steps=40, logger=logger)
    cost = prof.cost
    assert cost.windows == 4 and cost.seconds > 0 and 0 < cost.fraction < 1
    assert cost.training_seconds > 0 and cost.end_seconds is not None and cost.end_seconds >= 0
    assert prof.overhead_fraction == cost.fraction and prof.overhead_seconds == cost.seconds
    summary = prof.summary()
    head = summary.splitlines()[0]
    assert re.fullmatch(r"StreamProfiler: 4 windows on rank 0, profiling cost \d+\.\d% of the training time "
                        r"\(\d+\.\d\d s of \d+\.\d\d s\)", head), head
    assert f"of the training time ({cost.seconds:.2f} s of {cost.training_seconds:.2f} s, 4 windows): measured as " \
           f"{HOW_MEASURED}." in summary
    run_dir = os.path.dirname(os.path.dirname(prof.windows[0].path))
    html = open(os.path.join(run_dir, names.REPORT_FILE)).read()
    assert "Profiling cost" in html and f"{100 * cost.fraction:.1f}%" in html and "measured as the slowdown" in html
    events = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0})
    events.Reload()
    texts = [t.tensor_proto.string_val[0].decode() for t in events.Tensors("streamprof/summary/text_summary")]
    assert len(texts) == 4 and all("Profiling cost " in t and "measured as the slowdown" in t for t in texts)
    overhead = events.Scalars(OVERHEAD_TAG)
    assert len(overhead) == 5  # with each window's metrics, then once at the end
    assert all(0 <= e.value < 1 for e in overhead)
    assert overhead[-1].value == pytest.approx(cost.fraction, rel=1e-5)


def test_cost_sentence():
    cost = ProfilingCost(seconds=0.41, training_seconds=31.2, windows=9, end_seconds=0.3)
    assert cost.fraction == 0.41 / 31.2
    assert cost_headline(cost) == "profiling cost 1.3% of the training time (0.41 s of 31.20 s)"
    assert cost_sentence(cost) == (f"Profiling cost 1.3% of the training time (0.41 s of 31.20 s, 9 windows): measured"
                                   f" as {HOW_MEASURED}. No budget in this run (max_overhead=None): its windows fall"
                                   " where the schedule puts them; the default, max_overhead=\"auto\", moves them so"
                                   " that profiling stays within 1% of the training time (2% with record_shapes,"
                                   " profile_memory or with_stack). The end of the stage took 0.30 s more for the last"
                                   " window's export and the report.")
    assert "end of the stage" not in cost_sentence(ProfilingCost(0.0, 0.0, 0))
    assert ProfilingCost(0.0, 0.0, 0).fraction == 0.0


def test_the_worker_starts_before_the_first_step_at_a_low_priority(tmp_path, monkeypatch):
    events = []
    real_start = worker.AnalysisWorker._start

    def start(self):
        proc = real_start(self)
        events.append(("worker", proc.pid))
        return proc

    class Steps(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if not any(e[0] == "step" for e in events):
                pid = events[0][1] if events else None
                events.append(("step", _nice_and_env(pid)))

    monkeypatch.setattr(worker.AnalysisWorker, "_start", start)
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=2, every=0, max_overhead=None)
    fit(prof, tmp_path, max_steps=10, callbacks=[Steps()])
    assert [e[0] for e in events] == ["worker", "step"]  # one worker, started before the first step
    nice, env = events[1][1]
    assert nice == worker.NICE == 10
    assert {k: env.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")} == dict.fromkeys(
        ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"), "1")
    assert len(prof.windows) == 1 and prof.windows[0].analysis is not None


def _nice_and_env(pid):
    """The child's nice value (once it has set it) and environment."""
    deadline = time.monotonic() + 20
    while os.getpriority(os.PRIO_PROCESS, pid) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    env = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
    return os.getpriority(os.PRIO_PROCESS, pid), env


def test_a_cost_above_the_budget_says_why():
    """One window of 0.49 s in 32 s of training with a 1% budget: the sentence says that the first window is
    recorded whatever it costs; within the budget it says nothing of the kind."""
    over = ProfilingCost(seconds=0.49, training_seconds=32.0, windows=1, max_overhead=0.01, first_window_seconds=0.49)
    assert over.over_budget and "1.5% of the training time" in cost_sentence(over)
    assert ("That is above max_overhead (1%): the first window is recorded whatever it costs (0.49 s here), since"
            " nothing is known of a window's cost before one ran, and this run was too short to absorb it; the"
            " windows after it waited for the budget. A run of 49 s of training or more holds such a window within"
            " max_overhead (this one trained 32 s).") in cost_sentence(over)
    within = ProfilingCost(seconds=0.2, training_seconds=32.0, windows=1, max_overhead=0.01)
    assert not within.over_budget and "above max_overhead" not in cost_sentence(within)
    assert cost_sentence(within).endswith("own time in the training thread. Within max_overhead (1%).")
    assert not ProfilingCost(seconds=0.49, training_seconds=32.0, windows=1).over_budget  # no budget


def test_a_run_without_a_budget_says_so_with_the_defaults_budget():
    """max_overhead=None (the examples' short runs): the sentence says there was no budget, and the default's share,
    as settings.py defines it, so that a cost above 1% is not read as a broken promise."""
    from lightning_streamprof.profiling.settings import AUTO_OVERHEAD, DETAILED_OVERHEAD

    text = cost_sentence(ProfilingCost(seconds=0.1, training_seconds=2.0, windows=3))
    assert "5.0% of the training time" in text and "No budget in this run (max_overhead=None)" in text
    assert f"within {100 * AUTO_OVERHEAD:g}% of the training time ({100 * DETAILED_OVERHEAD:g}% with" in text
