"""AutoSwitch on a fake clock: every step of a way takes exactly the time the test gives it."""

import pytest

from lightning_streamprof.pipeline.auto import AutoSwitch
from lightning_streamprof.pipeline.decision import Measurement
from lightning_streamprof.pipeline.way import INLINE, SERIAL, THREAD, Way, candidate_ways

GRAPH = Way(True, True, True)
PIPED = INLINE


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def switch_of(ways=(SERIAL, PIPED), **kwargs):
    clock = Clock()
    kwargs.setdefault("settle", 1)
    return AutoSwitch(ways, clock=clock, **kwargs), clock


def drive(switch, clock, ms, steps):
    """``steps`` batches, each taking ``ms[way]`` milliseconds of the way in use; the ways used, in order."""
    used, current = [], switch.choice
    for _ in range(steps):
        clock.t += ms[current] / 1e3
        current = switch.step().way
        used.append(current)
    return used


def until_decided(switch, clock, ms, limit=200):
    """Drive until the next decision (its step included): the watch then starts afresh."""
    decided = len(switch.history)
    for _ in range(limit):
        drive(switch, clock, ms, steps=1)
        if len(switch.history) > decided:
            return
    raise AssertionError("no decision")


def test_keeps_pipelining_when_faster_and_serial_when_not():
    fast, clock = switch_of(warmup=2, trial=6, recheck=50)
    drive(fast, clock, {SERIAL: 4.0, PIPED: 2.0}, steps=40)
    assert fast.choice == PIPED and fast.history[0].gain == pytest.approx(1.0)
    assert fast.history[0].ms == {SERIAL: pytest.approx(4.0), PIPED: pytest.approx(2.0)}
    slow, clock = switch_of(warmup=2, trial=6, recheck=50)
    drive(slow, clock, {SERIAL: 2.0, PIPED: 2.1}, steps=40)
    assert slow.choice == SERIAL and slow.history[0].gain == pytest.approx(2.0 / 2.1 - 1)


def test_picks_the_fastest_of_several_pipelined_ways():
    switch, clock = switch_of((SERIAL, INLINE, THREAD), warmup=2, trial=6, recheck=50)
    drive(switch, clock, {SERIAL: 8.0, INLINE: 7.5, THREAD: 6.0}, steps=50)
    m = switch.history[0]
    assert switch.choice == m.choice == m.best == THREAD
    assert m.ms == {SERIAL: pytest.approx(8.0), INLINE: pytest.approx(7.5), THREAD: pytest.approx(6.0)}


def test_a_trial_must_be_longer_than_its_untimed_start():
    with pytest.raises(ValueError, match="`trial` must be more than 3 steps"):
        AutoSwitch((SERIAL, PIPED), trial=3, settle=3)
    with pytest.raises(ValueError, match="must start with serial"):
        AutoSwitch((PIPED, SERIAL))


def test_a_gain_within_the_margin_stays_serial():
    switch, clock = switch_of(warmup=1, trial=4, recheck=50, margin=0.5)
    drive(switch, clock, {SERIAL: 3.0, PIPED: 2.5}, steps=30)
    assert switch.history[0].gain == pytest.approx(0.2) and switch.choice == SERIAL


def test_a_mean_gain_that_the_trials_do_not_agree_on_stays_serial():
    """Serial trials 10 and 12 ms, pipelined 9 and 11: 8% faster on average, but its slowest trial is slower
    than serial's fastest, so the difference is within the noise."""
    m = Measurement({SERIAL: 11.0, THREAD: 10.0}, SERIAL, {SERIAL: [10.0, 12.0], THREAD: [9.0, 11.0]})
    assert m.gain > 0.05 and m.worst_gain(THREAD) == pytest.approx(10 / 11 - 1)
    switch, _ = switch_of((SERIAL, THREAD), warmup=1, trial=3, recheck=50)
    switch._times = {SERIAL: [10.0, 12.0], THREAD: [9.0, 11.0]}
    switch._decide()
    assert switch.choice == SERIAL
    switch._times = {SERIAL: [10.0, 10.5], THREAD: [9.0, 9.5]}  # every trial faster by > 2%
    switch._decide()
    assert switch.choice == THREAD


def test_a_mean_gain_above_the_margin_that_every_trial_agrees_on_is_taken():
    """Serial 10.0 and 10.4 ms, pipelined 9.6 and 9.9: 4.6% faster on average, its slowest trial 1% faster than
    serial's fastest: a small gain, but one the trials agree on. A mean gain under the margin is not."""
    switch, _ = switch_of((SERIAL, THREAD), warmup=1, trial=4, recheck=50)
    switch._times = {SERIAL: [10.0, 10.4], THREAD: [9.6, 9.9]}
    switch._decide()
    assert switch.history[-1].worst_gain(THREAD) == pytest.approx(10.0 / 9.9 - 1) and switch.choice == THREAD
    switch._times = {SERIAL: [10.0, 10.2], THREAD: [9.95, 9.98]}  # 1.3% on average
    switch._decide()
    assert switch.choice == SERIAL


def test_trials_alternate_then_the_choice_runs_until_a_confirming_round():
    switch, clock = switch_of(warmup=1, trial=3, recheck=5)
    used = drive(switch, clock, {SERIAL: 1.0, PIPED: 0.95}, 1 + 12 + 5 + 6)
    # warm-up step, then pipelined / serial / pipelined / serial trials of 3 steps, then 5 steps of the choice,
    # then one confirming round (the choice and serial once each)
    assert used[:12] == [PIPED] * 3 + [SERIAL] * 3 + [PIPED] * 3 + [SERIAL] * 3
    assert switch.history[0].choice == PIPED
    assert used[12:17] == [PIPED] * 5
    assert len(switch.history) == 2 and switch.history[1].trials == {SERIAL: [pytest.approx(1.0)],
                                                                      PIPED: [pytest.approx(0.95)]}


def test_a_clear_loser_is_cut_short_and_sits_out_the_next_rounds():
    """The graph way (tried first, as the most promising) runs 30% slower than serial: it is not tried in the
    second pass of the first round, and it sits out 1, then 3 rounds as it keeps losing. The inline way, tried
    after serial, is cut short after 2 timed steps."""
    ways = (SERIAL, INLINE, THREAD, GRAPH)
    switch, clock = switch_of(ways, warmup=1, trial=6, recheck=10, abort_after=2, max_recheck=10)
    ms = {SERIAL: 10.0, INLINE: 12.0, THREAD: 10.0, GRAPH: 13.0}
    used = drive(switch, clock, ms, 1 + 6 * 3 + 3 + 6 * 2)
    first = switch.history[0]
    assert set(first.clear_losers) == {GRAPH, INLINE} and first.choice == SERIAL
    assert first.trials[GRAPH] == [pytest.approx(13.0)] and first.trials[INLINE] == [pytest.approx(12.0)]
    assert used[:6] == [GRAPH] * 6 and used[6:12] == [SERIAL] * 6 and used[12:18] == [THREAD] * 6
    assert used[18:21] == [INLINE] * 3  # cut after its settle step and 2 timed steps
    assert first.trials[SERIAL] == [pytest.approx(10.0)] * 2 and len(first.trials[THREAD]) == 2
    for _ in range(6):
        drive(switch, clock, ms, 10 + 4 * 6)
    tried = [set(m.ms) for m in switch.history]
    assert [GRAPH in t for t in tried[:6]] == [True, False, True, False, False, False]


def test_trials_that_confirm_the_choice_come_ever_less_often():
    """recheck 5, at most 20: each later round confirms serial and doubles the interval (10, 20, then still 20).
    Serial is clearly faster, so the pipelined way is cut short and sits out: the round in which it sits out
    confirms serial without a trial."""
    switch, clock = switch_of(warmup=1, trial=3, recheck=5, max_recheck=20, abort_after=1)
    intervals, current, trial_steps = [], SERIAL, 0
    for _ in range(1, 200):
        clock.t += (1.0 if current == SERIAL else 1.5) / 1e3
        before = switch.interval, len(switch.history)
        current = switch.step().way
        trial_steps += switch.in_trials
        if (switch.interval, len(switch.history)) != before:
            intervals.append((switch.interval, len(switch.history)))
    assert intervals[:4] == [(5, 1), (10, 1), (20, 2), (20, 3)] and switch.choice == SERIAL
    assert trial_steps < 45  # of 199 steps


def test_a_changed_choice_or_a_revert_starts_the_interval_again():
    switch, clock = switch_of(warmup=1, trial=4, recheck=50, watch=10)
    until_decided(switch, clock, {SERIAL: 4.0, PIPED: 2.0})
    assert switch.choice == PIPED and switch.interval == 50
    switch.interval, switch._left = 200, 150  # as after confirming rounds
    drive(switch, clock, {SERIAL: 4.0, PIPED: 6.0}, steps=2 + 10 + 8)  # the watch, then paired trials
    assert switch.reverts and switch.choice == SERIAL and switch._left <= 50  # trials soon after a revert
    assert switch.interval == 50  # the revert: not a confirmation
    assert switch.sitting_out == {PIPED: 1}  # it lost clearly beside serial: one round out, then tried again


def test_a_steady_state_slower_than_serial_is_timed_again_beside_serial_before_it_reverts():
    """Trials: pipelined 2 ms vs serial 4 ms. Then the pipelined steady state degrades to 6 ms per step: the
    watch window suspects it, paired trials time both ways again, and serial takes over."""
    switch, clock = switch_of(warmup=1, trial=4, recheck=200, watch=10)
    until_decided(switch, clock, {SERIAL: 4.0, PIPED: 2.0})
    assert switch.choice == PIPED and not switch.reverts
    used = drive(switch, clock, {SERIAL: 4.0, PIPED: 6.0}, steps=2 + 10 + 8 + 3)
    assert switch.choice == SERIAL and len(switch.reverts) == 1
    revert = switch.reverts[0]
    assert revert.way == PIPED and revert.watched_ms == pytest.approx(6.0)
    assert revert.way_ms == pytest.approx(6.0) and revert.serial_ms == pytest.approx(4.0)
    assert switch.history[-1].ms == {SERIAL: pytest.approx(4.0), PIPED: pytest.approx(6.0)}  # the paired trials
    assert used[-1] == SERIAL and used[0] == PIPED


def test_a_slow_steady_state_window_that_paired_trials_do_not_confirm_keeps_the_choice():
    """A window slowed by something the caller did not mark (noise): timed beside serial the choice is still
    clearly faster, so it stays: no revert on a stale trial mean against a long mean."""
    switch, clock = switch_of(warmup=1, trial=4, recheck=200, watch=10)
    until_decided(switch, clock, {SERIAL: 4.0, PIPED: 2.0})
    drive(switch, clock, {SERIAL: 4.0, PIPED: 5.0}, steps=2 + 10)  # the slow window: a suspicion
    assert switch.in_trials
    drive(switch, clock, {SERIAL: 4.0, PIPED: 2.0}, steps=8 + 30)
    assert switch.choice == PIPED and not switch.reverts and len(switch.history) == 2


def test_steps_marked_as_not_training_are_left_out_of_trials_and_the_trial_runs_longer():
    """A validation pass or a profiler window in a trial: its step (100 ms) and the next are not timed."""
    switch, clock = switch_of(warmup=1, trial=6, recheck=500)
    ms = {SERIAL: 4.0, PIPED: 2.0}
    current = switch.step().way  # warm-up ends
    steps = 0
    while not switch.history and steps < 40:
        slow = steps in (3, 12)  # one marked step in each way's trial
        if slow:
            switch.exclude()
        clock.t += (100.0 if slow else ms[current]) / 1e3
        current = switch.step().way
        steps += 1
    m = switch.history[0]
    assert m.ms == {SERIAL: pytest.approx(4.0), PIPED: pytest.approx(2.0)} and m.choice == PIPED
    assert steps == 2 * 6 + 2 * 2  # each trial ran two steps longer


def test_steps_marked_as_not_training_are_left_out_of_the_steady_state_watch():
    switch, clock = switch_of(warmup=1, trial=4, recheck=500, watch=10)
    until_decided(switch, clock, {SERIAL: 4.0, PIPED: 2.0})
    for i in range(40):
        if i % 7 == 0:
            switch.exclude()  # validation and checkpoints every few steps
        clock.t += (50.0 if i % 7 == 0 else 2.0) / 1e3
        switch.step()
    assert switch.choice == PIPED and not switch.in_trials and not switch.reverts


def test_a_steady_state_as_fast_as_the_trials_keeps_pipelining():
    switch, clock = switch_of(warmup=1, trial=4, recheck=200, watch=10)
    drive(switch, clock, {SERIAL: 4.0, PIPED: 2.0}, steps=1 + 16 + 40)
    assert switch.choice == PIPED and not switch.reverts


def test_every_timing_goes_through_reduce_so_that_ranks_decide_alike():
    """``reduce`` stands for the mean over DDP ranks: here the other rank's pipelined steps are slow, so the mean
    says serial although this rank alone would pipeline."""
    seen = []

    def other_rank_mean(values):  # [ms per step, ms waited for the loader per step]
        seen.append(list(values))
        return [(v + o) / 2 for v, o in zip(values, [8.0, 0.0])]  # the other rank: 8 ms per step whatever the way

    switch, clock = switch_of(warmup=1, trial=4, recheck=100, reduce=other_rank_mean, abort_after=3)
    drive(switch, clock, {SERIAL: 4.0, PIPED: 2.0}, steps=1 + 16)
    assert seen == [[2.0, 0.0], [4.0, 0.0]]  # serial, clearly slower, is not tried a second time
    assert switch.history[0].ms == {SERIAL: pytest.approx(6.0), PIPED: pytest.approx(5.0)}
    assert switch.choice == PIPED  # 5 vs 6 ms after averaging: still a clear gain
    other = []
    switch, clock = switch_of(warmup=1, trial=4, recheck=100, reduce=lambda v: other.append(v) or [9.0, 0.0])
    drive(switch, clock, {SERIAL: 4.0, PIPED: 2.0}, steps=1 + 16)
    assert switch.choice == SERIAL and other  # equal means: no gain


def test_measurement():
    m = Measurement({SERIAL: 10.0, INLINE: 9.0, THREAD: 8.0}, choice=THREAD)
    assert m.best == THREAD and m.gain == 0.25 and m.serial_ms == 10.0


def test_candidate_ways_never_try_a_graph_without_a_backbone():
    assert candidate_ways(inline=True, thread=True, graph=False) == [SERIAL, INLINE, THREAD]
    assert candidate_ways(inline=True, thread=True, graph=None) == [SERIAL, INLINE, GRAPH]
    assert candidate_ways(inline=True, thread=False, graph=None) == [SERIAL, INLINE, Way(True, False, True)]
    assert candidate_ways(inline=False, thread=True, graph=True) == [SERIAL, GRAPH]
    assert [w.key for w in candidate_ways(True, True, None)] == ["serial", "inline", "thread+graph"]
    with pytest.raises(ValueError):
        Way(staged=False, thread=True)


def test_a_loader_bound_serial_step_keeps_serial():
    """Serial waits for the loader 40% of its step: a pipelined trial that looks faster (it drained the loader's
    queue) cannot keep that pace, so serial stays."""
    switch, clock = switch_of(warmup=1, trial=4, recheck=100)
    current = SERIAL
    for _ in range(1 + 16):
        clock.t += (10.0 if current == SERIAL else 7.0) / 1e3
        if current == SERIAL:
            switch.waited(0.004)
        current = switch.step().way
    m = switch.history[0]
    assert m.serial_wait_ms == pytest.approx(4.0) and m.loader_share == pytest.approx(0.4)
    assert m.gain > 0.4 and switch.choice == SERIAL


def test_serial_clearly_slower_than_the_first_way_is_cut_short_and_the_way_chosen():
    switch, clock = switch_of((SERIAL, INLINE, THREAD, GRAPH), warmup=1, trial=20, recheck=100, settle=3, abort_after=5)
    used = drive(switch, clock, {SERIAL: 12.0, INLINE: 12.0, THREAD: 11.0, GRAPH: 6.0}, 1 + 20 + 3 * 8)
    m = switch.history[0]
    assert switch.choice == GRAPH and set(m.clear_losers) == {SERIAL, INLINE, THREAD}
    assert used.count(GRAPH) == 20 + 1 and used.count(SERIAL) == 8  # no second pass: nothing left to compare
