import re
from types import SimpleNamespace

import pytest

from lightning_streamprof.pipeline import explain
from lightning_streamprof.pipeline.auto import AutoSwitch
from lightning_streamprof.pipeline.decision import Round
from lightning_streamprof.pipeline.paired import Verdict
from lightning_streamprof.pipeline.steering import Steering
from lightning_streamprof.pipeline.way import INLINE, SERIAL


class Recorder:
    def __init__(self):
        self.logged = []

    def log_metrics(self, metrics, step):
        self.logged.append((step, metrics))


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def steering_of(logger, global_step, auto):
    """Auto's steering in a fit whose Trainer has ``logger`` and is at ``global_step``."""
    steering = Steering(SERIAL, SimpleNamespace(loggers=[logger], global_step=global_step), lambda way: None)
    steering.auto = auto
    return steering


def _drive(steering, clock, ms, steps):
    way = steering.auto.choice
    for _ in range(steps):
        clock.t += ms[way] / 1e3
        way = steering.next()
    return way


def test_each_auto_decision_is_logged_with_its_gain():
    logger = Recorder()
    clock = Clock()
    steering = steering_of(logger, 42, AutoSwitch((SERIAL, INLINE), warmup=1, recheck=1000, clock=clock))
    way = _drive(steering, clock, {SERIAL: 4.0, INLINE: 2.0}, steps=400)
    assert len(steering.auto.history) == 1 and way == INLINE
    step, metrics = logger.logged[-1]
    assert step == 42 and metrics == {"streampipe/pipelined": 1.0, "streampipe/gain": steering.auto.history[0].gain,
                                      "streampipe/threaded": 0.0, "streampipe/graphed": 0.0}
    assert metrics["streampipe/gain"] == pytest.approx(1.0)
    # one pair beyond 1.5x: the next round after 8 x recheck; the watch's limit is half the 2x margin
    assert steering.auto.next_round == steering.auto.history[0].step + 8000 and steering.auto.watch_limit == 0.5
    report = explain.report(explain.Facts(mode="auto", auto=steering.auto))
    assert f"next trials at step {steering.auto.next_round} (sooner if it runs over 50% slower than in its blocks)" \
        in report, report
    verdict = Verdict(SERIAL, INLINE, (1.25,) * 6, (1.25, 1.25), "faster", 10.0, 8.0, 130)
    assert Round(140, "first", (verdict,), INLINE).gain == pytest.approx(0.25)
    assert Round(140, "first", (verdict, verdict), INLINE).steps == 260  # the steps its comparisons timed


def test_a_revert_is_logged_with_the_steady_state_loss_and_reported():
    logger = Recorder()
    clock = Clock()
    auto = AutoSwitch((SERIAL, INLINE), warmup=1, recheck=5000, watch=20, clock=clock)
    steering = steering_of(logger, 7, auto)
    _drive(steering, clock, {SERIAL: 1.0, INLINE: 0.5}, steps=300)
    assert auto.choice == INLINE and not auto.reverts
    _drive(steering, clock, {SERIAL: 1.0, INLINE: 3.0}, steps=400)  # the pipelined way now 3 ms per step
    assert auto.choice == SERIAL and len(auto.reverts) == 1
    step, metrics = logger.logged[-1]
    assert metrics["streampipe/pipelined"] == 0.0 and metrics["streampipe/gain"] == pytest.approx(1.0 / 3.0 - 1.0)
    report = explain.report(explain.Facts(mode="auto", auto=steering.auto))
    # the watch's tolerance was half the margin the way had over serial (2x): 50%, not the 15% floor
    assert re.search(r"steady state: pipelined \d\.\d{3} ms/step over 20 training steps, over 50% slower than in its"
                     r" blocks", report), report
    assert auto.reverts[0].tolerance == pytest.approx(0.5)
    assert f"next trials at step {auto.next_round} (sooner after a new epoch, dataloader or validation)" in report
    assert "serial measurably faster beside it (the way at 0.333x serial's speed) -> serial from step" in report
    assert "trials (watch, ended at step" in report and "-> serial (-66.7% for the best pipelined way)" in report
    assert "serial: 3.000x the speed of pipelined" in report
    assert report.startswith("StreamPipeline (auto, no CUDA device: in order, without streams; now serial):"), report
