"""The step-time watch fires on a slowdown that stays, not on a run's noise, stalls, validation or StreamPipeline's
trials; its settings are checked at construction."""

import random

import pytest

from lightning_streamprof import StreamProfiler
from lightning_streamprof.profiling.step_watch import StepWatch, WatchSettings, taints
from lightning_streamprof.results.triggers import REFERENCE, SLOWDOWN

BASE = 0.010


class Fired:
    def __init__(self, accept=True):
        self.triggers, self.accept = [], accept

    def __call__(self, trigger):
        self.triggers.append(trigger)
        return self.accept

    def of(self, reason):
        return [t for t in self.triggers if t.reason == reason]


def feed(watch, times, start=0, tainted=()):
    for i, seconds in enumerate(times, start):
        if i in tainted:
            watch.tainted = True
        watch.add(seconds, i)


def noisy(n, rng, base=BASE, sigma=0.10, spikes=0.02):
    """Step times with lognormal noise and a few steps twice as long (a loader's hiccups)."""
    return [base * rng.lognormvariate(0, sigma) * (2.0 if rng.random() < spikes else 1.0) for _ in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_noise_never_fires_but_a_slowdown_does_soon_after_it_starts(seed):
    rng = random.Random(seed)
    fired = Fired()
    watch = StepWatch(WatchSettings(), fired, offset=lambda: 1000)
    feed(watch, noisy(3000, rng))
    assert fired.of(SLOWDOWN) == []
    assert len(fired.of(REFERENCE)) == 1  # once, when the baseline is first known
    assert watch.baseline == pytest.approx(BASE, rel=0.05)
    feed(watch, [1.4 * t for t in noisy(300, rng)], start=3000)
    (trigger,) = fired.of(SLOWDOWN)  # fired once: the run stays slow, nothing more to say
    assert abs(trigger.step - (3000 + 1000)) <= 10  # the global step the slowdown started at
    assert trigger.baseline_ms == pytest.approx(10, rel=0.05)
    assert trigger.recent_ms == pytest.approx(14, rel=0.1)
    assert watch.triggers == [trigger]


def test_it_fires_again_after_the_run_recovered_and_slowed_again():
    rng = random.Random(1)
    fired = Fired()
    watch = StepWatch(WatchSettings(), fired)
    feed(watch, noisy(500, rng))
    feed(watch, [1.5 * t for t in noisy(200, rng)], start=500)
    feed(watch, noisy(200, rng), start=700)
    feed(watch, [1.5 * t for t in noisy(200, rng)], start=900)
    assert [t.step for t in fired.of(SLOWDOWN)] == [pytest.approx(500, abs=3), pytest.approx(900, abs=3)]


def test_a_window_that_could_not_be_placed_is_asked_for_again():
    rng = random.Random(2)
    fired = Fired(accept=False)
    watch = StepWatch(WatchSettings(), fired)
    feed(watch, noisy(300, rng))
    feed(watch, [1.5 * t for t in noisy(100, rng)], start=300)
    assert len(fired.of(SLOWDOWN)) >= 3 and watch.triggers == []  # at every look while the run is slow


def test_single_stalls_are_listed_and_fire_nothing():
    rng = random.Random(3)
    fired = Fired()
    watch = StepWatch(WatchSettings(), fired, offset=lambda: 7)
    times = noisy(600, rng)
    times[400] = 15 * BASE
    times[450] = 0.3
    feed(watch, times)
    assert [(s.step, round(s.ms)) for s in watch.stalls] == [(407, 150), (457, 300)]
    assert all(s.median_ms == pytest.approx(10, rel=0.05) for s in watch.stalls)
    assert fired.of(SLOWDOWN) == []


def test_validation_checkpoints_and_trials_are_left_out():
    rng = random.Random(4)
    fired = Fired()
    trials = {"on": False}
    watch = StepWatch(WatchSettings(), fired, busy=lambda: trials["on"])
    feed(watch, noisy(400, rng))
    slow = [3 * t for t in noisy(200, rng)]
    feed(watch, slow, start=400, tainted=set(range(400, 600)))  # every step had validation or a checkpoint in it
    trials["on"] = True
    feed(watch, slow, start=600)  # StreamPipeline timing ways
    assert fired.of(SLOWDOWN) == []
    trials["on"] = False
    feed(watch, slow, start=800)
    assert len(fired.of(SLOWDOWN)) == 1


def test_steps_before_skip_first_are_left_out():
    fired = Fired()
    watch = StepWatch(WatchSettings(), fired, skip=100)
    feed(watch, [0.1] * 100 + [BASE] * 200)  # a slow start (compilation, caches) is not the baseline
    assert watch.baseline == pytest.approx(BASE)


def test_actions_that_taint_a_step():
    assert taints("save_checkpoint") and taints("run_training_epoch")
    assert taints("[Strategy]SingleDeviceStrategy.on_validation_model_zero_grad")
    assert not taints("run_training_batch") and not taints("[_TrainingEpochLoop].train_dataloader_next")


def test_settings_of_the_watch():
    assert StreamProfiler()._settings.watch == WatchSettings(factor=1.25, steps=50, stall_factor=10.0)
    assert StreamProfiler(slowdown=False)._settings.watch is None
    assert StreamProfiler(slowdown=True)._settings.watch.factor == 1.25
    watch = StreamProfiler(slowdown=1.5, slowdown_steps=20, stall_factor=5)._settings.watch
    assert watch == WatchSettings(1.5, 20, 5.0)


@pytest.mark.parametrize("kwargs, error, text", [
    ({"slowdown": 1.0}, ValueError, "`slowdown` must be False, a number > 1, got 1.0 (float)"),
    ({"slowdown": "high"}, TypeError, "`slowdown` must be False, a number > 1, got 'high' (str)"),
    ({"slowdown_steps": 5}, ValueError, "`slowdown_steps` must be an integer >= 10, got 5 (int)"),
    ({"stall_factor": 0.5}, ValueError, "`stall_factor` must be a number > 1, got 0.5 (float)"),
])
def test_bad_watch_settings_are_refused_in_one_line(kwargs, error, text):
    with pytest.raises(error) as info:
        StreamProfiler(**kwargs)
    assert str(info.value) == f"StreamProfiler: {text}"


def test_a_state_that_cannot_be_read_counts_as_trials():
    def broken():
        raise RuntimeError("state gone")

    fired = Fired()
    watch = StepWatch(WatchSettings(), fired, busy=broken)
    feed(watch, [BASE] * 300 + [3 * BASE] * 300)
    assert watch.baseline is None and fired.triggers == []
