"""``mode="auto"`` on a fake host whose speed drifts as the GPU host's does (a ±10% slow wave, a 15% step change at a
random moment, ±5% noise per step): of seeded whole runs, how many choose the truly faster way, how many revert, and
what the trials cost over always running the faster way, and how many steps they took (with ways alike, the
trials cost nothing on this host, which has no switch to pay for: their steps are what a real one pays for).

    python -m benchmarks auto-fake-host --seeds 100 --steps 10000

The host and the run are those of the CPU tests (``tests/pipeline/fake_host.py``; ``tests/pipeline/test_auto.py``
asserts >= 95 of 100 and <= 2%); this gives the figures. No torch device is used: the clock is the fake host's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "pipeline"))
sys.path.insert(0, ROOT)

from _record import code_version, command, machine, machine_line, now, results_dir  # noqa: E402
from fake_host import GRAPH, whole_run  # noqa: E402

from lightning_streamprof.pipeline.way import SERIAL  # noqa: E402

#: (name, serial ms, pipelined ms): the faster way by 5% either way, by 1.3x, and by 2x; the ways alike (in doubt,
#: the pipelined way is right: its results equal serial's)
CASES = [("pipelined 5% faster", 10.0, 10.0 / 1.05), ("serial 5% faster", 10.0 / 1.05, 10.0),
         ("pipelined 1.3x", 10.0, 10.0 / 1.3), ("pipelined 2x", 10.0, 5.0), ("alike", 10.0, 10.0)]


def measure(name: str, serial_ms: float, piped_ms: float, seeds: int, steps: int) -> dict:
    """Over ``seeds`` runs: the first and the final choice right, the reverts, the rounds, and the trials' cost."""
    right = GRAPH if piped_ms <= serial_ms else SERIAL
    first = final = reverts = rounds = trial_steps = 0
    costs = []
    for seed in range(seeds):
        switch, cost = whole_run(seed, serial_ms, piped_ms, steps)
        first += switch.history[0].choice == right
        final += switch.choice == right
        reverts += len(switch.reverts)
        rounds += len(switch.history)
        trial_steps += sum(r.steps for r in switch.history)
        costs.append(cost)
    return {"case": name, "serial_ms": serial_ms, "pipelined_ms": piped_ms, "seeds": seeds, "steps": steps,
            "first_right": first, "final_right": final, "reverts": reverts, "rounds_mean": rounds / seeds,
            "trial_steps_mean": trial_steps / seeds,
            "cost_median": statistics.median(costs), "cost_max": max(costs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=100)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--tag", default="cpu")
    args = p.parse_args()
    rows = []
    for name, serial_ms, piped_ms in CASES:
        rows.append(measure(name, serial_ms, piped_ms, args.seeds, args.steps))
        print(json.dumps(rows[-1]), flush=True)
    m = machine()
    lines = [f"# auto_fake_host ({now()})", "", f"`{command('auto_fake_host.py')}`  ",
             f"code {code_version()}; {machine_line(m)}; {args.seeds} seeded runs of {args.steps} steps each", "",
             "| case | first choice right | final choice right | reverts | rounds per run | steps in trials per run"
             " | trials' cost: median | max |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['first_right']} | {r['final_right']} | {r['reverts']} |"
                     f" {r['rounds_mean']:.1f} | {r['trial_steps_mean']:.0f} | {r['cost_median']:.2%} |"
                     f" {r['cost_max']:.2%} |")
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"auto_fake_host-{args.tag}")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(base + ".json", "w") as f:
        json.dump({"benchmark": "auto_fake_host", "date": now(), "command": command("auto_fake_host.py"),
                   "code": code_version(), "machine": m, "rows": rows}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
