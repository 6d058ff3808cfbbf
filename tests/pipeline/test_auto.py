"""AutoSwitch on a fake clock: the safe way unless serial is measurably faster beside it, the upgrade path, the
steady-state watch, and a host whose speed drifts (a ±10% slow wave, a step change mid-trial, ±5% noise)."""

import math
from collections import Counter

import pytest
from fake_host import GRAPH, Host, whole_run

from lightning_streamprof.pipeline import auto as auto_module
from lightning_streamprof.pipeline.auto import AutoSwitch, trial_order
from lightning_streamprof.pipeline.way import INLINE, SERIAL, THREAD, Way, candidate_ways


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def switch_of(ways=(SERIAL, INLINE), **kwargs):
    clock = Clock()
    kwargs.setdefault("warmup", 2)
    return AutoSwitch(ways, clock=clock, **kwargs), clock


def drive(switch, clock, ms, steps):
    """``steps`` batches, each taking ``ms[way]`` milliseconds of the way in use (a callable of the step: ms
    then); the ways used, in order."""
    used, current = [], switch.choice
    for _ in range(steps):
        clock.t += (ms(switch.steps) if callable(ms) else ms)[current] / 1e3
        current = switch.step().way
        used.append(current)
    return used


def until_decided(switch, clock, ms, limit=2000):
    decided = len(switch.history)
    for _ in range(limit):
        drive(switch, clock, ms, steps=1)
        if len(switch.history) > decided:
            return switch.history[-1]
    raise AssertionError("no decision")


def test_the_run_starts_on_the_safe_way_the_one_mode_on_runs():
    for ways in (candidate_ways(True, True, None), candidate_ways(True, True, False), [SERIAL, INLINE]):
        switch, _ = switch_of(ways)
        assert switch.choice == switch.safe == trial_order(ways)[0]
        assert switch.choice == Way(True, THREAD in ways or GRAPH in ways, GRAPH in ways)


def test_serial_only_when_the_pipelined_way_is_measurably_slower():
    fast, clock = switch_of()
    r = until_decided(fast, clock, {SERIAL: 4.0, INLINE: 2.0})
    # the way in force is the base of the blocks, serial the candidate: serial is slower
    assert (r.verdicts[0].base, r.verdicts[0].candidate, r.verdicts[0].outcome) == (INLINE, SERIAL, "slower")
    assert fast.choice == INLINE and r.gain == pytest.approx(1.0)
    slow, clock = switch_of()
    r = until_decided(slow, clock, {SERIAL: 2.0, INLINE: 2.2})
    assert slow.choice == SERIAL and r.verdicts[0].outcome == "faster" and r.gain == pytest.approx(2.0 / 2.2 - 1)


def test_in_doubt_the_safe_way_runs():
    """Equal ways with noise: the interval holds 1, the pipelined way stays."""
    host = Host(4, {SERIAL: 10.0, INLINE: 10.0}, wave=0.0, change=0.0, noise=0.2)
    switch = AutoSwitch((SERIAL, INLINE), warmup=2, clock=host.clock)
    r = None
    while r is None:
        host.run(switch.choice)
        r = switch.step().measured
    assert r.verdicts[0].outcome == "unclear" and r.choice == INLINE == switch.choice


def test_the_first_round_tries_the_other_pipelined_ways_only_when_serial_beat_the_safe_way():
    ways = (SERIAL, INLINE, GRAPH)
    # serial and the safe way alike: unclear keeps the safe way, and the others are not tried
    host = Host(4, {SERIAL: 6.0, INLINE: 4.0, GRAPH: 6.0}, wave=0.0, change=0.0, noise=0.2)
    switch = AutoSwitch(ways, warmup=2, clock=host.clock)
    r = None
    while r is None:
        host.run(switch.choice)
        r = switch.step().measured
    assert [(v.base, v.candidate, v.outcome) for v in r.verdicts] == [(GRAPH, SERIAL, "unclear")]
    assert switch.choice == GRAPH
    # the safe way measurably faster than serial: it stays, nothing else is tried (what mode="on" gets)
    switch, clock = switch_of(ways)
    r = until_decided(switch, clock, {SERIAL: 8.0, INLINE: 5.0, GRAPH: 6.0})
    assert [(v.base, v.candidate, v.outcome) for v in r.verdicts] == [(GRAPH, SERIAL, "slower")]
    assert switch.choice == GRAPH and r.gain == pytest.approx(8.0 / 6.0 - 1)
    # the safe way slower than serial: the others are timed against the winner, and win only when faster
    switch, clock = switch_of(ways)
    r = until_decided(switch, clock, {SERIAL: 5.0, INLINE: 4.0, GRAPH: 6.0})
    assert [(v.base, v.candidate, v.outcome) for v in r.verdicts] == [(GRAPH, SERIAL, "faster"),
                                                                      (SERIAL, INLINE, "faster")]
    assert switch.choice == INLINE and r.gain == pytest.approx(5.0 / 4.0 - 1)
    switch, clock = switch_of(ways)
    r = until_decided(switch, clock, {SERIAL: 5.0, INLINE: 5.5, GRAPH: 6.0})
    # the inline way, which must be measurably faster to take over, lost three pairs: out of reach, the blocks stop
    assert switch.choice == SERIAL and [v.outcome for v in r.verdicts] == ["faster", "unclear"]
    assert r.verdicts[1].challenger == INLINE and len(r.verdicts[1].ratios) == 3
    # a later round compares serial with the choice only, from serial against the safe way (the upgrade path)
    r = until_decided(switch, clock, {SERIAL: 5.0, INLINE: 5.5, GRAPH: 6.0})
    assert r.reason == "recheck" and [(v.base, v.candidate) for v in r.verdicts] == [(SERIAL, GRAPH)]


def test_a_clear_difference_stops_the_blocks_after_three_pairs_a_decisive_one_after_one():
    switch, clock = switch_of()
    r = until_decided(switch, clock, {SERIAL: 2.6, INLINE: 2.0})
    assert len(r.verdicts[0].ratios) == 3 and r.verdicts[0].steps == 7 * switch.rule.settle + 7 * switch.rule.block
    switch, clock = switch_of()
    r = until_decided(switch, clock, {SERIAL: 4.0, INLINE: 2.0})  # twice as fast: one serial block
    assert r.verdicts[0].ratios == (0.5,) and r.verdicts[0].steps == 3 * (switch.rule.settle + switch.rule.block)
    assert switch.choice == INLINE


def test_a_block_must_be_longer_than_its_untimed_start():
    with pytest.raises(ValueError, match="`trial` must be more than 2 steps"):
        AutoSwitch((SERIAL, INLINE), trial=2)
    with pytest.raises(ValueError, match="ways must start with serial"):
        AutoSwitch((INLINE, SERIAL))


def _gaps(switch, clock, ms, rounds=5):
    """The steps each choice ran between the end of one round and the start of the next."""
    ends = [until_decided(switch, clock, ms).step for _ in range(rounds)]
    lengths = [r.verdicts[0].steps for r in switch.history]
    return [b - a - n for a, b, n in zip(ends, ends[1:], lengths[1:])]


def test_rounds_that_keep_the_choice_come_ever_less_often():
    switch, clock = switch_of(recheck=300, max_recheck=1200)
    ms = {SERIAL: 2.6, INLINE: 2.0}  # clear after three pairs, not decisive
    assert _gaps(switch, clock, ms) == [300, 600, 1200, 1200]  # `recheck`, then each kept one twice as long
    assert all(r.verdicts[0].beyond == switch.rule.clear for r in switch.history)
    switch, clock = switch_of(recheck=300, max_recheck=1200)
    assert _gaps(switch, clock, {SERIAL: 2.0, INLINE: 2.6}) == [300, 600, 1200, 1200]  # serial in force alike


def test_a_decisive_pipelined_win_runs_the_longest_interval_at_once():
    """One pair beyond 1.5x: the next round comes after `max_recheck` steps, not `recheck` (the watch guards
    the way in force); a slowdown of that way still calls a round at once."""
    switch, clock = switch_of(recheck=300, max_recheck=1200, watch=50)
    ms = {SERIAL: 4.0, INLINE: 2.0}
    assert _gaps(switch, clock, ms, rounds=3) == [1200, 1200]
    assert all(r.verdicts[0].beyond == switch.rule.decisive for r in switch.history)
    slow = {SERIAL: 4.0, INLINE: 3.2}  # the way in force 60% slower: beyond half its margin
    r = until_decided(switch, clock, slow)
    assert r.reason == "watch" and r.step - switch.history[-2].step < 300
    # serial decisively faster than the safe way, then another way faster than serial by a clear margin only:
    # that choice was not won decisively, its next round comes after `recheck`
    switch, clock = switch_of((SERIAL, INLINE, GRAPH), recheck=300, max_recheck=1200)
    r = until_decided(switch, clock, {SERIAL: 4.0, GRAPH: 8.0, INLINE: 3.0})
    assert [(v.base, v.candidate, v.outcome, v.beyond) for v in r.verdicts] == [
        (GRAPH, SERIAL, "faster", switch.rule.decisive), (SERIAL, INLINE, "faster", switch.rule.clear)]
    assert switch.choice == INLINE and switch.next_round == r.step + 300


def test_a_serial_run_moves_to_the_pipelined_way_when_paired_blocks_favour_it():
    """The upgrade path: serial wins the first round; later the pipelined way gets faster; the recheck moves."""
    switch, clock = switch_of(recheck=300)

    def ms(step):
        return {SERIAL: 4.0, INLINE: 5.0 if step < 400 else 2.0}

    first = until_decided(switch, clock, ms)
    assert first.choice == SERIAL
    again = until_decided(switch, clock, ms)
    assert again.reason == "recheck" and again.choice == INLINE and switch.choice == INLINE
    assert [(v.base, v.candidate, v.outcome) for v in again.verdicts] == [(SERIAL, INLINE, "faster")]


def test_a_change_of_phase_brings_a_serial_run_s_next_round_forward():
    switch, clock = switch_of(recheck=5000)
    ms = {SERIAL: 4.0, INLINE: 5.0}
    first = until_decided(switch, clock, ms)
    drive(switch, clock, ms, steps=10)
    switch.phase_changed()  # too soon after a round: not before PHASE_GAP steps from its end
    r = until_decided(switch, clock, ms)
    started = r.step - r.verdicts[0].steps
    assert r.reason == "recheck" and started - first.step == auto_module.PHASE_GAP
    drive(switch, clock, ms, steps=auto_module.PHASE_GAP)
    switch.phase_changed()
    at = switch.steps
    r = until_decided(switch, clock, ms)
    assert r.step - r.verdicts[0].steps - at == auto_module.PHASE_DELAY
    # a pipelined choice is not affected (its watch looks after it)
    piped, clock = switch_of(recheck=5000)
    until_decided(piped, clock, {SERIAL: 4.0, INLINE: 2.0})
    left = piped._left
    piped.phase_changed()
    assert piped._left == left


def test_a_steady_state_slower_than_its_blocks_is_timed_beside_serial_before_it_reverts():
    switch, clock = switch_of(recheck=5000, watch=50)
    until_decided(switch, clock, {SERIAL: 4.0, INLINE: 2.0})
    decisions = []
    for _ in range(400):  # the pipelined way now 6 ms per step against serial's 4
        clock.t += {SERIAL: 4.0, INLINE: 6.0}[switch.choice] / 1e3
        decisions.append(switch.step())
    [revert] = switch.reverts
    assert switch.choice == SERIAL and revert.way == INLINE and revert.watched_ms == pytest.approx(6.0)
    assert revert.verdict.outcome == "faster" and revert.gain == pytest.approx(4.0 / 6.0 - 1)
    assert switch.history[-1].reason == "watch"
    assert [d.reverted for d in decisions if d.reverted] == [revert]


@pytest.mark.parametrize("ms, slower, called", [({SERIAL: 4.0, INLINE: 2.0}, 1.3, False),
                                                 ({SERIAL: 4.0, INLINE: 2.0}, 1.6, True),
                                                 ({SERIAL: 4.0, INLINE: 3.6}, 1.2, True)],
                         ids=["2x-margin-30%-slower", "2x-margin-60%-slower", "11%-margin-20%-slower"])
def test_the_watch_calls_a_round_for_a_slowdown_beyond_its_tolerance_or_half_the_margin(ms, slower, called):
    switch, clock = switch_of(recheck=5000, watch=50)
    until_decided(switch, clock, ms)
    drive(switch, clock, {SERIAL: ms[SERIAL] * slower, INLINE: ms[INLINE] * slower}, steps=300)
    assert (switch.history[-1].reason == "watch") is called


def test_the_paired_blocks_wait_for_the_device_and_the_steady_state_watch_never_does():
    syncs = []
    switch, clock = switch_of(recheck=5000, watch=50, sync=lambda: syncs.append(switch.steps))
    until_decided(switch, clock, {SERIAL: 4.0, INLINE: 2.0})
    in_trials = len(syncs)
    drive(switch, clock, {SERIAL: 4.0, INLINE: 2.0}, steps=1000)  # 20 steady-state windows
    assert in_trials >= 4 and len(syncs) == in_trials and len(switch.history) == 1


def test_a_slow_steady_state_window_that_paired_blocks_do_not_confirm_keeps_the_choice():
    """The host slowed down for both ways: the watch asks, the paired blocks find the pipelined way still faster."""
    switch, clock = switch_of(recheck=5000, watch=50)
    until_decided(switch, clock, {SERIAL: 4.0, INLINE: 2.0})
    r = until_decided(switch, clock, {SERIAL: 8.0, INLINE: 4.0})
    assert r.reason == "watch" and r.choice == INLINE and not switch.reverts
    # the window is now read against the new figures: no further round at the slower speed
    drive(switch, clock, {SERIAL: 8.0, INLINE: 4.0}, steps=300)
    assert len(switch.history) == 2


def test_steps_left_out_are_not_timed():
    """Every fourth step has 50 ms of something else (validation, a window), marked: the ratio stays clean."""
    switch, clock = switch_of()
    ms = {SERIAL: 4.0, INLINE: 2.0}
    for i in range(2000):
        if i % 4 == 1:
            clock.t += 0.05
            switch.exclude()
        drive(switch, clock, ms, steps=1)
        if switch.history:
            break
    v = switch.history[0].verdicts[0]
    assert v.base_ms == pytest.approx(2.0) and v.candidate_ms == pytest.approx(4.0)


def test_an_epoch_end_that_costs_nothing_does_not_stretch_the_blocks():
    """Epochs of 4 batches whose ends are marked but take no longer than a step: the first round ends when it would
    without the marks (but for the first steps of each way's first block, with nothing to compare them with yet), with the same
    figures: a cheap end is timed like any step."""
    ms = {SERIAL: 4.0, INLINE: 2.0}
    ends = []
    for mark in (False, True):
        switch, clock = switch_of()
        for i in range(2000):
            if mark and i % 4 == 3:
                switch.exclude()
            drive(switch, clock, ms, steps=1)
            if switch.history:
                break
        ends.append(switch.history[0].step)
        v = switch.history[0].verdicts[0]
        assert v.base_ms == pytest.approx(2.0) and v.candidate_ms == pytest.approx(4.0)
    assert ends[0] <= ends[1] <= ends[0] + 4  # 13 steps more when every marked step was left out


def test_every_timing_goes_through_reduce_so_that_ranks_decide_alike():
    seen = []
    switch, clock = switch_of(reduce=lambda values: seen.append(values) or [3.0 for _ in values])
    r = until_decided(switch, clock, {SERIAL: 4.0, INLINE: 2.0})
    assert seen and len(seen) == 2 * len(r.verdicts[0].ratios) + 1
    assert r.verdicts[0].outcome == "unclear" and switch.choice == INLINE  # all ranks' mean: equal


def test_candidate_ways_never_try_a_graph_without_a_backbone():
    assert candidate_ways(True, True, False) == [SERIAL, INLINE, THREAD]
    assert candidate_ways(True, True, None) == [SERIAL, INLINE, GRAPH]
    assert candidate_ways(False, True, True) == [SERIAL, GRAPH]


@pytest.mark.parametrize("serial_ms, piped_ms", [(10.0, 10.0 / 1.05), (10.0 / 1.05, 10.0)],
                         ids=["pipelined-5%-faster", "serial-5%-faster"])
def test_drift_does_not_fool_the_choice(serial_ms, piped_ms):
    """100 seeded runs of 3,000 steps each (rounds at the start, after 1,000 steps, after 3,000)."""
    right = GRAPH if piped_ms < serial_ms else SERIAL
    first, final, reverts = Counter(), Counter(), 0
    for seed in range(100):
        switch, _ = whole_run(seed, serial_ms, piped_ms, 3000)
        first[switch.history[0].choice == right] += 1
        final[switch.choice == right] += 1
        reverts += len(switch.reverts)
    assert first[True] >= 95 and final[True] >= 95, (first, final)
    if right == GRAPH:
        assert reverts == 0


@pytest.mark.parametrize("serial_ms, piped_ms", [(10.0, 10.0 / 1.05), (10.0 / 1.05, 10.0), (10.0, 10.0 / 1.3),
                                                 (10.0 / 1.3, 10.0)])
def test_trials_cost_at_most_two_percent_of_a_ten_thousand_step_run(serial_ms, piped_ms):
    costs = [whole_run(seed, serial_ms, piped_ms, 10_000)[1] for seed in range(5)]
    assert max(costs) <= 0.02, costs
    assert not any(math.isnan(c) for c in costs)
