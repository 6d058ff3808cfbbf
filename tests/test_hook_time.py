"""What the profiler's hooks on Lightning's actions cost every step: sampled steps timed call by call, less a no-op
call's time, the boundary call that ends a sampled step counted to it, nothing timed inside windows, and a short run
sampled too."""

import itertools

import lightning as L
import pytest
from helpers import fit

from lightning_streamprof import StreamProfiler
from lightning_streamprof.profiling.action_scope import QUIET_SCOPE, ActionScope
from lightning_streamprof.profiling.hook_time import FIRST_SAMPLE, SAMPLE_EVERY, HookTime, timed_call_floor
from lightning_streamprof.report.cost import ProfilingCost


class FakeClock:
    """A clock that moves only when the test moves it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _call(hooks, clock, seconds, boundary=None):
    """One hook call that takes ``seconds`` by the clock (a boundary call: ``boundary`` is its watching flag)."""
    def fn(_action):
        clock.now += seconds
        if boundary is not None:
            hooks.step_boundary(boundary)
    hooks.timed(fn, "a")


def test_a_sampled_step_counts_its_calls_less_the_floor_and_its_closing_boundary():
    clock = FakeClock()
    hooks = HookTime(floor=1e-6, clock=clock)
    for _ in range(FIRST_SAMPLE - 1):
        assert hooks.step_boundary(False) is False
    assert hooks.step_boundary(False) is True  # the first sample's step is timed
    for _ in range(10):
        _call(hooks, clock, 5e-6)
    _call(hooks, clock, 8e-6, boundary=False)  # the next step starts: the sample, its boundary call included
    assert hooks.samples == [pytest.approx(10 * 4e-6 + 7e-6)]
    assert hooks.timing is False and hooks.steps == FIRST_SAMPLE + 1
    assert hooks.per_step == pytest.approx(47e-6)
    assert hooks.seconds == pytest.approx(47e-6 * (FIRST_SAMPLE + 1))
    timed = [hooks.step_boundary(False) for _ in range(2 * SAMPLE_EVERY)]
    assert [i for i, t in enumerate(timed, FIRST_SAMPLE + 2) if t] == [FIRST_SAMPLE + SAMPLE_EVERY,
                                                                     FIRST_SAMPLE + 2 * SAMPLE_EVERY]


def test_steps_in_a_window_or_its_export_are_not_sampled():
    hooks = HookTime()
    timed = [hooks.step_boundary(watching=True) for _ in range(3 * SAMPLE_EVERY)]
    assert not any(timed) and hooks.samples == [] and hooks.per_step is None and hooks.seconds == 0.0


def test_a_sample_due_in_a_window_waits_for_the_first_step_after_it():
    hooks = HookTime()
    watching = [FIRST_SAMPLE - 2 <= step <= FIRST_SAMPLE + 4 for step in range(1, 40)]
    timed = [step for step, w in enumerate(watching, 1) if hooks.step_boundary(w)]
    assert timed == [FIRST_SAMPLE + 5]


def test_a_sample_whose_boundary_logged_a_window_is_dropped_and_the_next_step_timed():
    clock = FakeClock()
    hooks = HookTime(clock=clock)
    for _ in range(FIRST_SAMPLE):
        hooks.step_boundary(False)
    assert hooks.timing
    _call(hooks, clock, 5e-6)

    def boundary_that_logs(_action):
        clock.now += 1e-3  # logging a window's results
        hooks.step_boundary(False, spoiled=True)
    hooks.timed(boundary_that_logs, "a")
    assert hooks.samples == [] and hooks.timing  # the next step is timed instead
    _call(hooks, clock, 6e-6)
    _call(hooks, clock, 2e-6, boundary=False)
    assert hooks.samples == [pytest.approx(8e-6)]


def test_the_floor_is_a_timed_no_op_call():
    readings = itertools.count(0.0, 1e-7)
    assert timed_call_floor(lambda: next(readings), calls=10) == pytest.approx(1e-7)


def test_a_fit_states_what_its_hooks_cost_and_leaves_no_timed_hook_behind(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=10**9)
    fit(prof, tmp_path, max_steps=2 * SAMPLE_EVERY + 5)
    cost = prof.cost
    assert cost.hook_per_step is not None and abs(cost.hook_per_step) < 1e-3
    assert len(prof._hooks.samples) == 2
    assert cost.hook_seconds == pytest.approx(cost.hook_per_step * (2 * SAMPLE_EVERY + 5), rel=0.05)
    assert not {"start", "stop", "profile"} & set(vars(prof))
    more = "more" if cost.hook_per_step >= 0 else "less"
    assert f"hooks took {abs(cost.hook_per_step) * 1e6:.0f} µs per step {more} than with no profiler" in cost.sentence()


def test_a_sampled_step_counts_its_scopes_savings_against_lightnings():
    clock = FakeClock()
    hooks = HookTime(floor=1e-6, clock=clock, savings={QUIET_SCOPE: 2e-6, ActionScope: 1e-6})
    for _ in range(FIRST_SAMPLE):
        hooks.step_boundary(False)
    for _ in range(5):
        hooks.scoped(QUIET_SCOPE, "quiet")  # a no-op scope: no hook is called
    assert isinstance(hooks.scoped(lambda action: ActionScope(None, action), "loop"), ActionScope)
    _call(hooks, clock, 4e-6)  # the ActionScope's start
    _call(hooks, clock, 0.0, boundary=False)
    assert hooks.samples == [pytest.approx((4e-6 - 1e-6) - 5 * 2e-6 - 1e-6)]  # below zero: cheaper than none
    assert hooks.per_step < 0


def test_an_action_no_hook_handles_gets_a_shared_no_op_scope_outside_windows(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=10**9)
    seen = []
    fit(prof, tmp_path, max_steps=3, callbacks=[_Probe(seen)])
    quiet, loop = seen[0]
    assert isinstance(quiet, QUIET_SCOPE) and quiet is prof.profile("[Callback]_Probe.on_train_batch_start")
    assert isinstance(loop, ActionScope)
    with quiet as name:
        assert name == "[Callback]_Probe.on_train_batch_start"  # as Lightning's scope yields the action's name
    assert set(prof._scope_savings) == {QUIET_SCOPE, ActionScope}
    assert prof._scope_savings[QUIET_SCOPE] > 0  # a nullcontext against a generator: several times cheaper
    assert "streamprof-calibration" not in prof._quiet


def test_inside_a_window_every_action_gets_a_scope_that_records_it_and_sees_exceptions(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=2, every=None)
    calls = []
    fit(prof, tmp_path, max_steps=1)
    prof._recorder = type("Watching", (), {"watching": True})()
    prof.start, prof.stop = (lambda a: calls.append(("start", a))), (lambda a: calls.append(("stop", a)))
    prof._on_exception = lambda err: calls.append(("exception", type(err).__name__))
    scope = prof.profile("[Callback]X.on_train_batch_start")
    assert isinstance(scope, ActionScope)
    with pytest.raises(KeyboardInterrupt), scope:
        raise KeyboardInterrupt
    assert calls == [("start", "[Callback]X.on_train_batch_start"), ("exception", "KeyboardInterrupt"),
                     ("stop", "[Callback]X.on_train_batch_start")]


class _Probe(L.Callback):
    """Keeps the profiler's scopes of a quiet action and of a loop action, once."""

    def __init__(self, seen):
        self.seen = seen

    def on_train_batch_start(self, trainer, *args):
        if not self.seen:
            profiler = trainer.profiler
            self.seen.append((profiler.profile("[Callback]_Probe.on_train_batch_start"),
                              profiler.profile("run_training_batch")))


def test_the_hooks_clause_of_the_cost_sentence():
    cost = ProfilingCost(seconds=0.2, training_seconds=20.0, windows=1, max_overhead=0.01, hook_seconds=0.05,
                         hook_per_step=25e-6, hook_sample_every=SAMPLE_EVERY)
    assert cost.hook_fraction == 0.0025
    assert cost.sentence().endswith(
        "Within max_overhead (1%). Apart from the windows, Lightning's calls of the profiler's hooks took 25 µs per"
        f" step more than with no profiler (0.25% of the training time; timed in 1 step of {SAMPLE_EVERY}).")
    cheaper = ProfilingCost(seconds=0.2, training_seconds=20.0, windows=1, hook_seconds=-0.02, hook_per_step=-10e-6,
                            hook_sample_every=SAMPLE_EVERY)
    assert ("hooks took 10 µs per step less than with no profiler (0.10% of the training time; timed in 1 step of"
            f" {SAMPLE_EVERY}): the profiler's scope of an action costs less than Lightning's own") in cheaper.sentence()
    assert "hooks" not in ProfilingCost(seconds=0.2, training_seconds=20.0, windows=1).sentence()
    unsampled = ProfilingCost(seconds=0.2, training_seconds=2.0, windows=1, hook_sample_every=SAMPLE_EVERY)
    assert unsampled.sentence().endswith("The profiler's hooks were not timed: no step outside the windows came to"
                                         " their first sample (their cost is in the steps, not in this figure).")


def test_a_run_too_short_to_sample_its_hooks_says_so(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=10**9)
    fit(prof, tmp_path, max_steps=FIRST_SAMPLE - 2)
    assert prof.cost.hook_per_step is None and "hooks were not timed" in prof.cost.sentence()
