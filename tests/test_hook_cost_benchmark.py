"""``benchmarks/hook_cost.py``, where the cost of StreamProfiler's hooks is measured: one step's actions replayed
through each live profiler mid-fit cost less through the profiler's own scopes than through Lightning's, stay
within a millisecond of no profiler's, and the tables say so against no profiler."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from hook_cost import CONFIGS, recorded_step, replay, tables  # noqa: E402

LOOPS = 200


def test_the_replay_measures_each_profiler_s_hooks_on_one_step():
    step = recorded_step()
    assert any(kind == "scope" for kind, _ in step) and any(kind == "stop" for kind, _ in step)
    replays = {r["config"]: r for r in (replay(config, step, LOOPS) for config in CONFIGS)}
    assert {r["actions"] for r in replays.values()} == {sum(kind != "stop" for kind, _ in step)}
    ours, lightnings, none = (replays[c]["replay_us"] for c in ("streamprof", "lightning-scope", "none"))
    assert ours < lightnings  # a shared no-op scope and plain scope objects against a generator: several times cheaper
    assert abs(ours - none) < 1e3  # within a millisecond per step of no profiler
    lines = tables([], list(replays.values()), LOOPS)
    assert lines[0].startswith(f"One step's {replays['none']['actions']} actions replayed")
    assert f"| none | {none:.2f} | +0.00 |" in lines
    assert f"| streamprof | {ours:.2f} | {ours - none:+.2f} |" in lines


def test_paired_rounds_are_read_against_the_round_s_fit_without_a_profiler():
    replays = [{"config": c, "actions": 3, "replay_us": 1.0} for c in CONFIGS]
    extra = {"none": 0.0, "streamprof": 5.0, "lightning-scope": 30.0}
    rows = [{"round": r, "config": c, "step_us": 1000.0 + 10 * r + extra[c]} for r in range(3) for c in CONFIGS]
    lines = tables(rows, replays)
    assert "| streamprof | 1015.0 | +5.0, +5.0, +5.0 | +5.0 |" in lines
    assert "| lightning-scope | 1040.0 | +30.0, +30.0, +30.0 | +30.0 |" in lines
