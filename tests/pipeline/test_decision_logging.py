from types import SimpleNamespace

import pytest

from lightning_streamprof.pipeline import explain
from lightning_streamprof.pipeline.auto import AutoSwitch
from lightning_streamprof.pipeline.decision import Measurement
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


def test_each_auto_decision_is_logged_with_its_gain():
    logger = Recorder()
    clock = Clock()
    steering = steering_of(logger, 42, AutoSwitch((SERIAL, INLINE), warmup=1, trial=2, recheck=100, settle=0,
                                                  clock=clock))
    way = SERIAL
    for _ in range(1 + 4 * 2):
        clock.t += 0.004 if way == SERIAL else 0.002
        way = steering.next()
    assert len(steering.auto.history) == 1 and way == INLINE
    step, metrics = logger.logged[-1]
    assert step == 42 and metrics == {"streampipe/pipelined": 1.0, "streampipe/gain": steering.auto.history[0].gain,
                                      "streampipe/threaded": 0.0, "streampipe/graphed": 0.0}
    assert metrics["streampipe/gain"] == pytest.approx(1.0)
    assert Measurement({SERIAL: 10.0, INLINE: 8.0}, INLINE).gain == 0.25


def test_a_revert_is_logged_with_the_steady_state_loss_and_reported():
    logger = Recorder()
    clock = Clock()
    auto = AutoSwitch((SERIAL, INLINE), warmup=1, trial=3, recheck=100, settle=1, watch=5, clock=clock)
    steering = steering_of(logger, 7, auto)
    auto.history.append(Measurement({SERIAL: 1.0, INLINE: 0.5}, INLINE))
    auto._phase, auto.choice, auto._left = -1, INLINE, 100
    ms = {INLINE: 3.0, SERIAL: 1.0}  # the pipelined way now 3 ms per step against serial's 1 ms
    way = INLINE
    for _ in range(2 + 5 + 6):  # the watch window, then paired trials of both ways
        clock.t += ms[way] / 1e3
        way = steering.next()
    assert auto.choice == SERIAL and len(auto.reverts) == 1
    step, metrics = logger.logged[-1]
    assert metrics["streampipe/pipelined"] == 0.0 and metrics["streampipe/gain"] == pytest.approx(1.0 / 3.0 - 1.0)
    report = explain.report(explain.Facts(mode="auto", auto=steering.auto))
    assert "steady state: pipelined 3.000 ms/step over 5 training steps, slower than serial's trials" in report
    assert "timed again beside serial in paired trials: 3.000 against serial's 1.000 -> serial until the next" in report
