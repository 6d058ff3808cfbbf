"""The statistics of the overhead benchmarks, on hand-made step times and ratios: what a window leaves behind
(``_aftermath.py``), what auto's trials cost inside a run (``_trial_cost.py``), and how many rounds a 1-point answer needs (``profiler_overhead.py``, ``overhead_noise.py``)."""

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from _aftermath import GAP, after_before, late_start, lingering  # noqa: E402
from _trial_cost import trial_share  # noqa: E402
from overhead_noise import pooled  # noqa: E402
from profiler_overhead import rounds_for_one_point  # noqa: E402


def _steps(before: float, after: float, steps: int = 1000) -> list[float]:
    """Step times of ``before`` until the late window starts, ``after`` from then on."""
    return [before if i < late_start(steps) else after for i in range(steps)]


def test_after_before_is_the_median_step_after_the_window_over_the_one_before():
    result = after_before(_steps(10.0, 12.0), 1000, first=100)
    assert result["ratio"] == pytest.approx(1.2)
    assert result["span"] == 300 and result["after_watched"] == 0


def test_the_window_and_its_export_are_left_out_of_after():
    durations = _steps(10.0, 10.0)
    start = late_start(1000)
    watched = [False] * 1000
    for i in range(start, start + GAP + 200):  # an export that outlasts the gap: 200 steps of "after" in it
        durations[i], watched[i] = 50.0, True
    result = after_before(durations, 1000, first=100, watched=watched)
    assert result["ratio"] == pytest.approx(1.0) and result["after_watched"] == 200


def test_after_before_needs_twenty_steps_on_each_side():
    assert after_before(_steps(10.0, 12.0, 300), 300, first=140) is None  # 10 steps before the window
    assert after_before(_steps(10.0, 12.0, 120), 120, first=10) is None  # 10 steps after the gap


def test_lingering_compares_each_round_with_its_control_and_skips_missing_ones():
    late = [{"ratio": 1.10}, {"ratio": 0.99}, None]
    control = [{"ratio": 1.00}, {"ratio": 0.90}, {"ratio": 1.0}]
    assert lingering(late, control) == pytest.approx([1.10, 1.10])


def test_rounds_for_one_point_from_the_spread_of_the_log_ratios():
    spread, needed = rounds_for_one_point([math.exp(0.1), 1.0, math.exp(-0.1)])
    assert spread == pytest.approx(0.1)
    assert needed == math.ceil((1.96 * 0.1 / 0.01) ** 2) == 385
    assert rounds_for_one_point([1.0, 1.1]) is None


def test_pooled_rounds_give_the_geometric_mean_with_a_student_t_interval():
    base = {"rate": 100.0}
    rows = [({"rate": 100.0 * math.exp(x), "stated_fraction": 0.01, "watched_steps": 5, "watched_excess_s": 0.2,
              "steps": 1000}, base) for x in (0.1, 0.0, -0.1)]
    p = pooled(rows)
    assert p["rounds"] == 3 and p["median"] == pytest.approx(1.0) and p["geomean"] == pytest.approx(1.0)
    half = 4.303 * 0.1 / math.sqrt(3)  # t(0.975, 2 degrees of freedom)
    assert p["low"] == pytest.approx(math.exp(-half)) and p["high"] == pytest.approx(math.exp(half))
    assert p["needed"] == 385 and p["stated"] == 0.01
    assert p["own_clock"] == pytest.approx(0.2 * 100.0 / 1000)  # the median run's excess x rate / steps


def test_swapped_blocks_pair_adjacent_blocks_and_drop_the_cut_ones():
    from _aftermath import swapped_blocks

    flags, durations = [], []
    for block in range(8):  # 8 blocks of 10 steps, the first profiler in the even ones, 5% slower there
        own = block % 2 == 0
        flags += [own] * 10
        durations += [10.5 if own else 10.0] * 10
    flags[:3], durations[:3] = [False] * 3, [99.0] * 3  # a first block cut short, left out with the last
    result = swapped_blocks(durations, flags, first=0)
    assert result["pairs"] == 3 and result["ratio"] == pytest.approx(1.05)
    assert swapped_blocks(durations[:25], flags[:25], first=0) is None


def test_pipeline_results_pair_each_profiled_configuration_with_the_same_one_alone(tmp_path):
    import json

    from overhead_noise import paired

    rates = {"serial": [10.0, 10.0], "auto": [20.0, 10.0], "auto+streamprof": [19.0, 11.0],
             "serial+streamprof": [9.0, 10.0], "on": [30.0, 30.0], "on+graph": [31.0, 29.0]}  # on+graph: no profiler
    result = {"code": "abc1234", "rows": [{"workload": "ldmsd:16", "rates": rates}]}
    path = tmp_path / "pipeline_runs-h200-x.json"
    path.write_text(json.dumps(result))
    pairs, within, series = paired([str(path)])
    assert series == ["h200-x (code abc1234)"] and within == []
    assert sorted(pairs) == [("ldmsd:16", "auto+streamprof"), ("ldmsd:16", "serial+streamprof")]
    ratios = [r["rate"] / b["rate"] for r, b in pairs[("ldmsd:16", "auto+streamprof")]]
    assert ratios == pytest.approx([0.95, 1.1])
    assert pooled(pairs[("ldmsd:16", "serial+streamprof")])["median"] == pytest.approx(0.95)


def test_trial_share_is_the_trial_steps_time_beyond_the_typical_step_over_the_run():
    # 100 steps of 10 ms, of which steps 20-29 in trials at 25 ms; steps before `first` are not timed
    durations = [50.0] * 10 + [10.0] * 90
    flags = [False] * 100
    for i in range(20, 30):
        durations[i], flags[i] = 25.0, True
    total = 10 * 25.0 + 80 * 10.0
    assert trial_share(durations, flags, first=10) == pytest.approx(10 * 15.0 / total)
    # a stall outside the trials moves the run's time, not the typical step
    durations[60] = 500.0
    assert trial_share(durations, flags, first=10) == pytest.approx(150.0 / (total + 490.0))
    # trials as fast as the rest cost nothing; slower steps in them cost; none in trials: nothing to measure
    assert trial_share([10.0] * 100, flags, first=10) == 0.0
    assert trial_share(durations, [False] * 100, first=10) is None
    assert trial_share(durations, [True] * 100, first=10) is None


def test_auto_rounds_are_written_one_run_per_item():
    from pipeline_runs import rounds_line

    rounds = [{"step": 270, "reason": "first", "choice": "serial", "steps": 260},
              {"step": 1140, "reason": "recheck", "choice": "thread+graph", "steps": 70}]
    assert rounds_line(rounds) == ("serial (first, step 270, 260 steps), "
                                   "thread+graph (recheck, step 1140, 70 steps)")
    assert rounds_line([]) == "no choice"  # a run that ended before auto's first choice
