"""A window off the schedule is recorded at once whatever the schedule, within the overhead budget (it waits while
the budget is spent, then records), takes the next scheduled window's place, and carries its trigger: a recorder on
a fake clock with the profiler's costs injected (as test_overhead_budget.py does)."""

import pytest
from test_overhead_budget import BASE, Clock, Costs, FakeExporter, FakeSession

from lightning_streamprof.profiling.recorder import WindowRecorder
from lightning_streamprof.profiling.schedule import OverheadBudget, WindowSchedule
from lightning_streamprof.results.triggers import REFERENCE, REQUEST, SLOWDOWN, WindowTrigger

ASK = WindowTrigger(reason=REQUEST, via="signal", step=40)


def run(schedule, max_overhead, asks, steps=400):
    """Train ``steps`` steps, asking for a window with ``asks[step]`` at those steps; the recorder and the exporter."""
    clock, costs = Clock(), Costs()
    exporter = FakeExporter(costs)
    recorder = WindowRecorder(schedule, OverheadBudget(max_overhead), exporter, lambda: FakeSession(clock, costs),
                              lambda: 0, run_name="run", run_dir="/nowhere", rank=0, world_size=1, clock=clock)
    answers = {}
    for step in range(steps):
        if step in asks:
            answers[step] = recorder.request_window(asks[step], step)
        recorder.step_boundary(lambda: 0)
        if exporter.busy and not recorder.active:
            exporter.left -= 1
        clock.advance(BASE + (costs.window_step if recorder.active else 0.0))
    return recorder, exporter, answers


def test_a_request_beyond_a_one_window_schedule_records_at_once():
    recorder, exporter, answers = run(WindowSchedule(skip_first=20, warmup=2, active=3, every=0), None, {40: ASK})
    assert answers == {40: True}
    assert exporter.submitted == [(22, 25), (42, 45)]  # the schedule's one window, then the request's at once
    assert recorder.triggers == {1: ASK}


def test_a_request_waits_while_the_budget_is_spent_then_records():
    recorder, exporter, _ = run(WindowSchedule(skip_first=20, warmup=2, active=3, every=0), 0.01, {40: ASK})
    (first, asked) = exporter.submitted
    assert first == (22, 25) and asked[0] > 100  # moved by the budget, not dropped
    assert recorder.moves[1] == 42 and recorder.triggers == {1: ASK}
    assert recorder.budget.fraction(recorder.training_seconds) <= 0.01 * 1.05


def test_a_new_slowdown_while_a_slowdowns_window_waits_for_the_budget_is_what_it_records_for():
    first = WindowTrigger(reason=SLOWDOWN, step=38, baseline_ms=10.0, recent_ms=12.5)
    second = WindowTrigger(reason=SLOWDOWN, step=70, baseline_ms=10.0, recent_ms=18.0)
    recorder, exporter, answers = run(WindowSchedule(skip_first=20, warmup=2, active=3, every=0), 0.01,
                                      {40: first, 80: second, 81: ASK})
    assert answers == {40: True, 80: True, 81: False}  # a request is no slowdown: it does not take the place
    (_, asked) = exporter.submitted
    assert asked[0] > 100 and recorder.triggers == {1: second}


def test_a_request_takes_the_next_scheduled_windows_place():
    schedule = WindowSchedule(skip_first=20, warmup=2, active=3, every=100, repeat=3)
    recorder, exporter, _ = run(schedule, None, {40: ASK})
    assert exporter.submitted == [(22, 25), (42, 45), (222, 225)]  # the window of step 122 gave its place
    assert recorder.triggers == {1: ASK}


def test_a_request_while_a_window_records_is_refused_and_a_reference_only_when_no_normal_window_was():
    schedule = WindowSchedule(skip_first=20, warmup=2, active=3, every=0)
    reference = WindowTrigger(reason=REFERENCE, baseline_ms=100.0)
    recorder, exporter, answers = run(schedule, None, {23: ASK, 200: reference})
    assert answers == {23: False, 200: False} and exporter.submitted == [(22, 25)]
    late = WindowSchedule(skip_first=1000, warmup=2, active=3, every=0)
    recorder, exporter, answers = run(late, None, {200: reference})
    assert answers == {200: True} and exporter.submitted == [(202, 205)]
    assert recorder.triggers[0].reason == REFERENCE


@pytest.mark.parametrize("synced, expected", [(False, False), (True, True)])
def test_a_multi_rank_recorder_takes_only_requests_every_rank_makes(synced, expected):
    clock, costs = Clock(), Costs()
    exporter = FakeExporter(costs)
    recorder = WindowRecorder(WindowSchedule(skip_first=1000, warmup=1, active=2, every=0), OverheadBudget(None),
                              exporter, lambda: FakeSession(clock, costs), lambda: 0, run_name="run",
                              run_dir="/nowhere", rank=1, world_size=2, clock=clock, agree=lambda w, d: d)
    for _ in range(5):
        recorder.step_boundary(lambda: 0)
        clock.advance(BASE)
    assert recorder.request_window(ASK, recorder.next_step, synced=synced) is expected
