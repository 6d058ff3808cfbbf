"""Paired blocks on a fake clock: the interval of the median by hand, and verdicts that the host's drift (a ±10% slow
wave, a step change in the middle, ±5% noise per step) does not fool."""

import math
from collections import Counter

import pytest
from fake_host import Host

from lightning_streamprof.pipeline.paired import (PairedBlocks, PairedRule, interval_order, median_interval,
                                                  out_of_reach, read_ratios)
from lightning_streamprof.pipeline.way import INLINE, SERIAL, Way


def test_median_interval_by_hand():
    # n=6: P(X<1) = 1/64 <= 2.5% < P(X<2) = 7/64, so k=1: the whole range
    assert median_interval([5, 1, 4, 2, 6, 3]) == (1, 6)
    # n=9: P(X<2) = 10/512 = 1.95% <= 2.5% < P(X<3) = 46/512, so k=2
    assert median_interval(range(1, 10)) == (2, 8)
    # n=12: P(X<3) = 79/4096 = 1.93% <= 2.5% < P(X<4) = 299/4096, so k=3
    assert median_interval(range(1, 13)) == (3, 10)
    # below the order where even k=1 reaches 2.5% (n=5: 1/32 = 3.1%): the whole range
    assert median_interval([3, 1, 2, 5, 4]) == (1, 5)
    assert all(math.isnan(v) for v in median_interval([]))


def test_reading_ratios():
    rule = PairedRule()
    assert read_ratios([1.05, 1.02, 1.08, 1.01, 1.04, 1.03], rule) == "faster"
    assert read_ratios([0.95, 0.97, 0.92, 0.99, 0.96, 0.98], rule) == "slower"
    assert read_ratios([1.05, 1.02, 0.99, 1.01, 1.04, 1.03], rule) == "unclear"  # one of six below: n too small
    assert read_ratios([1.05, 1.02, 0.80, 1.01, 1.04, 1.03, 1.06, 1.02, 1.07], rule) == "faster"  # one outlier of 9


def verdict(host, rule=PairedRule(), left_out=lambda step: False, base=SERIAL, candidate=INLINE, challenger=None):
    blocks = PairedBlocks(base, candidate, rule, host.clock, challenger=challenger)
    step = 0
    while True:
        host.run(blocks.way)
        v = blocks.step(left_out(step))
        step += 1
        if v is not None:
            return v


@pytest.mark.parametrize("serial_ms, piped_ms, expected", [(10.0, 10.0 / 1.05, "faster"),
                                                           (10.0 / 1.05, 10.0, "slower")],
                         ids=["pipelined-5%-faster", "serial-5%-faster"])
def test_drift_does_not_fool_the_verdict(serial_ms, piped_ms, expected):
    outcomes = Counter(verdict(Host(seed, {SERIAL: serial_ms, INLINE: piped_ms})).outcome for seed in range(100))
    assert outcomes[expected] >= 95, outcomes
    assert outcomes["faster" if expected == "slower" else "slower"] == 0, outcomes


def test_a_clear_case_stops_at_the_fewest_pairs():
    rule = PairedRule()
    v = verdict(Host(0, {SERIAL: 10.0, INLINE: 10.0 / 1.2}))
    assert v.outcome == "faster" and len(v.ratios) == rule.min_pairs
    assert v.steps == (2 * rule.min_pairs + 1) * (rule.settle + rule.block)
    assert 1.1 < v.ratio < 1.3 and v.interval[0] > 1.0
    assert "-> faster" in v.describe() and "6 paired blocks" in v.describe()


@pytest.mark.parametrize("factor", [1.3, 1 / 1.3])
def test_drift_never_makes_one_pair_decisive(factor):
    """A 30% difference under the host's drift, step change and noise: never stopped after one pair."""
    pairs = Counter(len(verdict(Host(seed, {SERIAL: 10.0, INLINE: 10.0 / factor})).ratios) for seed in range(100))
    assert pairs[1] == 0 and sum(pairs.values()) == 100, pairs


def test_a_decisive_difference_stops_after_one_pair_whatever_the_drift():
    outcomes = Counter((v.outcome, len(v.ratios)) for v in
                       (verdict(Host(seed, {SERIAL: 10.0, INLINE: 5.0})) for seed in range(100)))
    assert outcomes == {("faster", 1): 100}, outcomes


def test_a_verdict_stopped_early_says_by_what_not_a_one_pair_interval():
    rule = PairedRule()
    decisive = verdict(Host(0, {SERIAL: 10.0, INLINE: 5.0}))
    assert decisive.beyond == rule.decisive
    assert "(one pair of blocks beyond 1.50x, 30 steps;" in decisive.describe()
    assert "interval" not in decisive.describe()
    clear = verdict(Host(0, {SERIAL: 10.0, INLINE: 10.0 / 1.4}))  # beyond 1.25x in each pair, not 1.5x in the first
    assert clear.beyond == rule.clear and len(clear.ratios) == rule.quick_pairs
    assert f"({rule.quick_pairs} pairs of blocks, each beyond 1.25x," in clear.describe()
    assert verdict(Host(0, {SERIAL: 10.0, INLINE: 10.0 / 1.2})).beyond is None  # the interval decided


def test_an_unclear_case_stops_at_the_most_pairs():
    rule = PairedRule()
    v = verdict(Host(3, {SERIAL: 10.0, INLINE: 10.0}, wave=0.0, change=0.0, noise=0.2))
    assert len(v.ratios) == rule.max_pairs and v.steps == rule.longest


def test_left_out_steps_are_not_timed_and_lengthen_the_block():
    """A step with one second of something else in it (validation, a window), left out, does not count."""
    host = Host(0, {SERIAL: 10.0, INLINE: 10.0}, wave=0, change=0, noise=0)
    blocks = PairedBlocks(SERIAL, INLINE, PairedRule(), host.clock)
    step, stalls = 0, 0
    while True:
        host.run(blocks.way)
        stall = step % 25 == 6
        if stall:
            host.t += 1.0
            stalls += 1
        v = blocks.step(left_out=stall)
        step += 1
        if v is not None:
            break
    assert v.outcome == "unclear" and all(abs(r - 1) < 1e-9 for r in v.ratios)
    assert abs(v.base_ms - 10.0) < 1e-9 and abs(v.candidate_ms - 10.0) < 1e-9
    # each left-out timed step added one (a stall in the untimed settle steps needs none)
    assert stalls > 5 and PairedRule().longest < v.steps <= PairedRule().longest + stalls


def test_ranks_decide_alike_on_reduced_block_times():
    seen = []
    host = Host(1, {SERIAL: 10.0, INLINE: 8.0})
    blocks = PairedBlocks(SERIAL, INLINE, PairedRule(), host.clock, reduce=lambda v: seen.append(v) or [10.0])
    while True:
        host.run(blocks.way)
        v = blocks.step()
        if v is not None:
            break
    assert len(seen) == 2 * PairedRule().max_pairs + 1  # every block reduced; all equal, so unclear to the end
    assert v.outcome == "unclear" and set(v.ratios) == {1.0}


def test_out_of_reach_by_hand():
    rule = PairedRule()  # 12 pairs at most: the interval's order is 3, so 3 ratios against put a win out of reach
    assert interval_order(rule.max_pairs) == 3 and interval_order(6) == 1 and interval_order(9) == 2
    assert not out_of_reach([0.9, 0.95, 1.2], True, rule)  # two of three against the candidate: 10 of 12 may follow
    assert out_of_reach([0.9, 0.95, 1.0], True, rule)  # a tie counts against: the interval must clear 1
    assert out_of_reach([1.1, 1.3, 1.02, 0.8], False, rule)  # a challenging base wants ratios below 1
    assert not out_of_reach([0.8, 0.9, 1.1, 0.7, 0.95], False, rule)
    assert out_of_reach([0.9, 0.95, 0.99], True, PairedRule(max_pairs=12, min_pairs=6))
    assert not out_of_reach([0.9, 0.95, 0.99], True, PairedRule(max_pairs=20))  # order 6 at 20 pairs


def test_a_challenger_behind_in_every_pair_stops_after_three_pairs():
    """Serial, which must be measurably faster to take over, ran slower in each of the first three pairs: no later
    pair could make its interval clear 1, so the blocks stop (the old rule ran six pairs to the same choice)."""
    rule = PairedRule()
    host = Host(0, {SERIAL: 10.0, INLINE: 10.0 / 1.12}, wave=0.0, change=0.0, noise=0.01)
    v = verdict(host, base=INLINE, candidate=SERIAL, challenger=SERIAL)
    assert len(v.ratios) == interval_order(rule.max_pairs) == 3
    assert v.challenger == SERIAL and v.outcome == "unclear" and all(r < 1 for r in v.ratios)
    assert v.steps == (2 * 3 + 1) * (rule.settle + rule.block)
    assert "(3 of 3 paired blocks for pipelined, 70 steps;" in v.describe()
    assert v.describe().endswith("ms per step) -> serial cannot be measurably faster")
    assert "interval" not in v.describe()
    # without a challenger both outcomes matter: the same host runs to the interval's six pairs
    full = verdict(Host(0, {SERIAL: 10.0, INLINE: 10.0 / 1.12}, wave=0.0, change=0.0, noise=0.01), base=INLINE,
                   candidate=SERIAL)
    assert full.outcome == "slower" and len(full.ratios) == rule.min_pairs and full.challenger is None


@pytest.mark.parametrize("serial_ms, piped_ms", [(10.0, 10.0), (10.0, 10.0 / 1.05), (10.0 / 1.05, 10.0)],
                         ids=["alike", "pipelined-5%-faster", "serial-5%-faster"])
@pytest.mark.parametrize("serial_in_force", [False, True], ids=["pipelined-in-force", "serial-in-force"])
def test_stopping_when_serial_is_out_of_reach_changes_no_choice(serial_ms, piped_ms, serial_in_force):
    """On the drifting host, seed by seed, the blocks that stop once serial cannot win are the first pairs of the
    blocks that run to the end (the same steps), and those never found serial faster; where serial wins, both agree."""
    base, candidate = (SERIAL, INLINE) if serial_in_force else (INLINE, SERIAL)
    saved = []
    for seed in range(100):
        ms = {SERIAL: serial_ms, INLINE: piped_ms}
        short = verdict(Host(seed, ms), base=base, candidate=candidate, challenger=SERIAL)
        full = verdict(Host(seed, ms), base=base, candidate=candidate)
        assert full.ratios[:len(short.ratios)] == short.ratios
        serial_won = full.outcome == ("faster" if candidate == SERIAL else "slower")
        if short.challenger is not None:
            assert not serial_won and short.outcome != ("faster" if candidate == SERIAL else "slower")
        else:
            assert short == full
        saved.append(len(full.ratios) - len(short.ratios))
    if serial_ms >= piped_ms:  # serial no faster: most runs stop early
        assert sum(1 for s in saved if s > 0) >= 50, saved


def test_a_challenger_must_be_one_of_the_ways():
    with pytest.raises(ValueError, match="neither way"):
        PairedBlocks(SERIAL, INLINE, PairedRule(), lambda: 0.0, challenger=Way(True, True, True))


def test_rule_arguments_are_checked():
    with pytest.raises(ValueError, match="min_pairs"):
        PairedRule(min_pairs=5, max_pairs=4)
    with pytest.raises(ValueError, match="confidence"):
        PairedRule(confidence=1.0)
    with pytest.raises(ValueError, match="clear <= decisive"):
        PairedRule(clear=0.5, decisive=0.25)
