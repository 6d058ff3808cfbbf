import time

import pytest

from lightning_streamprof.pipeline.auto import AutoSwitch, Measurement


def drive(switch, seconds, steps):
    """Steps that take ``seconds[candidate]``; returns the candidate used at each step."""
    used = []
    current = "serial"
    for _ in range(steps):
        time.sleep(seconds[current])
        current = switch.step()
        used.append(current)
    return used


def test_keeps_pipelining_when_faster_and_serial_when_not():
    fast = AutoSwitch(warmup=2, trial=6, recheck=50, settle=1)
    drive(fast, {"serial": 0.004, "pipelined": 0.002}, steps=40)
    assert fast.pipelined and fast.choice == "pipelined" and fast.history[0].gain > 0.5
    slow = AutoSwitch(warmup=2, trial=6, recheck=50, settle=1)
    drive(slow, {"serial": 0.002, "pipelined": 0.004}, steps=40)
    assert not slow.pipelined and slow.history[0].gain < 0


def test_picks_the_fastest_of_several_pipelined_ways():
    switch = AutoSwitch(("serial", "inline", "thread"), warmup=2, trial=6, recheck=50, settle=1)
    drive(switch, {"serial": 0.008, "inline": 0.005, "thread": 0.002}, steps=50)
    m = switch.history[0]
    assert switch.choice == m.choice == m.best == "thread"
    assert m.ms["serial"] > m.ms["inline"] > m.ms["thread"]
    slower = AutoSwitch(("serial", "inline", "thread"), warmup=2, trial=6, recheck=50, settle=1)
    drive(slower, {"serial": 0.002, "inline": 0.006, "thread": 0.003}, steps=50)
    assert slower.choice == "serial" and slower.history[0].best == "thread"


def test_a_trial_must_be_longer_than_its_untimed_start():
    with pytest.raises(ValueError, match="`trial` must be more than 3 steps"):
        AutoSwitch(trial=3, settle=3)


def test_a_dropped_way_is_not_tried():
    switch = AutoSwitch(("serial", "inline", "thread", "thread+graph"), warmup=2, trial=4, recheck=100, settle=1)
    switch.drop("thread+graph")
    switch.drop("serial")  # serial always stays
    used = drive(switch, {"serial": 0.002, "inline": 0.002, "thread": 0.002, "thread+graph": 0.001}, steps=40)
    assert "thread+graph" not in used and set(switch.history[0].ms) == {"serial", "inline", "thread"}
    last = AutoSwitch(("serial", "thread"), warmup=2, trial=4)
    last.drop("thread")  # one pipelined way always stays
    assert last.candidates == ("serial", "thread")


def test_a_gain_within_the_margin_stays_serial():
    switch = AutoSwitch(warmup=1, trial=4, recheck=50, settle=1, margin=0.5)
    drive(switch, {"serial": 0.003, "pipelined": 0.0025}, steps=30)
    assert 0 < switch.history[0].gain < 0.5 and switch.choice == "serial"


def test_a_mean_gain_that_the_trials_do_not_agree_on_stays_serial():
    """Serial trials 10 and 12 ms, pipelined 9 and 11: 8% faster on average, but its slowest trial is
    slower than serial's fastest, so the difference is within the noise."""
    m = Measurement({"serial": 11.0, "thread": 10.0}, "serial", {"serial": [10.0, 12.0], "thread": [9.0, 11.0]})
    assert m.gain > 0.05 and m.worst_gain("thread") == pytest.approx(10 / 11 - 1)
    switch = AutoSwitch(("serial", "thread"), warmup=1, trial=3, recheck=50, settle=1)
    switch._times = {"serial": [10.0, 12.0], "thread": [9.0, 11.0]}
    switch._decide()
    assert switch.choice == "serial"
    switch._times = {"serial": [10.0, 10.5], "thread": [9.0, 9.5]}  # every trial faster by > 2%
    switch._decide()
    assert switch.choice == "thread"


def test_trials_alternate_and_recheck():
    switch = AutoSwitch(warmup=1, trial=3, recheck=5, settle=1)
    used = drive(switch, {"serial": 0.001, "pipelined": 0.001}, 1 + 12 + 5 + 12)
    # warm-up step, then serial / pipelined / serial / pipelined trials of 3 steps, then 5 steps of the choice
    assert used[:12] == ["serial"] * 3 + ["pipelined"] * 3 + ["serial"] * 3 + ["pipelined"] * 3
    assert used[12:17] == [switch.history[0].choice] * 5
    assert len(switch.history) == 2


def test_trials_that_confirm_the_choice_come_ever_less_often():
    """recheck 5, at most 20: the second decision confirms the first (interval 10), the third too (20), the
    fourth too (still 20)."""
    switch = AutoSwitch(warmup=1, trial=3, recheck=5, settle=1, max_recheck=20)
    decided_at = []
    current = "serial"
    for step in range(1, 1 + 12 + 5 + 12 + 10 + 12 + 20 + 12 + 1):
        time.sleep(0.001 if current == "serial" else 0.004)  # serial clearly faster: every round confirms it
        before = len(switch.history)
        current = switch.step()
        if len(switch.history) > before:
            decided_at.append((step, switch.interval))
    assert [i for _, i in decided_at] == [5, 10, 20, 20]
    assert [s for s, _ in decided_at] == [13, 13 + 5 + 12, 13 + 5 + 12 + 10 + 12, 13 + 5 + 12 + 10 + 12 + 20 + 12]


def test_a_changed_choice_or_a_revert_starts_the_interval_again():
    switch = AutoSwitch(warmup=1, trial=4, recheck=50, settle=1, watch=10)
    drive(switch, {"serial": 0.004, "pipelined": 0.002}, steps=1 + 16)
    assert switch.choice == "pipelined" and switch.interval == 50
    switch.interval = 200  # as after confirming rounds
    switch._left = 150
    drive(switch, {"serial": 0.004, "pipelined": 0.006}, steps=1 + 10 + 2)
    assert switch.reverts and switch._left <= 50  # trials soon after a revert
    drive(switch, {"serial": 0.004, "pipelined": 0.002}, steps=switch._left + 16)
    assert len(switch.history) == 2 and switch.interval == 50  # the revert in between: not a confirmation


def test_measurement_and_bad_candidates():
    m = Measurement({"serial": 10.0, "inline": 9.0, "thread": 8.0}, choice="thread")
    assert m.best == "thread" and m.gain == 0.25 and m.serial_ms == 10.0 and m.pipelined_ms == 8.0
    with pytest.raises(ValueError, match="candidates"):
        AutoSwitch(("thread", "serial"))


def test_a_pipelined_choice_slower_than_serial_in_steady_state_reverts_to_serial():
    """Trials: pipelined 2 ms vs serial 4 ms. Then the pipelined steady state degrades to 6 ms per step:
    the first watch window sees it and serial takes over until the next trials."""
    switch = AutoSwitch(warmup=1, trial=4, recheck=200, settle=1, watch=10)
    drive(switch, {"serial": 0.004, "pipelined": 0.002}, steps=1 + 16)
    assert switch.choice == "pipelined" and not switch.reverts
    used = drive(switch, {"serial": 0.004, "pipelined": 0.006}, steps=1 + 10 + 5)
    assert switch.choice == "serial" and len(switch.reverts) == 1
    revert = switch.reverts[0]
    assert revert.way == "pipelined" and revert.steady_ms > revert.serial_ms * 1.2
    assert used[-1] == "serial" and used[0] == "pipelined"


def test_a_steady_state_as_fast_as_the_trials_keeps_pipelining():
    switch = AutoSwitch(warmup=1, trial=4, recheck=200, settle=1, watch=10)
    drive(switch, {"serial": 0.004, "pipelined": 0.002}, steps=1 + 16 + 40)
    assert switch.choice == "pipelined" and not switch.reverts
