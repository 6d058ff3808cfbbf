"""How many paired rounds a ``pipeline-speed`` set needs before its mark and floor tell the code, not the host: the
round-to-round spread of two runs doing the same work, read from measured rounds, and from it the chance that a set
of ``k`` rounds meets the mark (median ratio >= ``--mark``) and keeps the floor (no round below ``--floor``) for a
given true ratio.

    python -m benchmarks mark-power benchmarks/results/pipeline-speed/pipeline_runs-h100-i34-*.json --tag h100-i34

The spread comes from rounds in which ``mode="auto"`` ended on a pipelined way (the way ``mode="on"`` runs) beside a
``mode="on"`` run: the two runs differ only by auto's trials, so their ratio's spread about each workload's median is
the host's. The chances are drawn from those residuals (seeded resampling, ``--draws`` sets per figure), each set's
rounds independent; "all N" is the chance that N workloads of that spread all meet the mark.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from _record import code_version, command, now, results_dir  # noqa: E402

from benchmarks.pool import ended_on, expand, read_results  # noqa: E402

ROUNDS = (5, 7, 9, 11, 15, 21)
TRUE_X_ON = (0.99, 1.0)  #: auto's true speed against mode="on": its trials' cost of about 1%, and none
TRUE_X_SERIAL = (1.0, 1.05, 1.1)  #: auto's true speed against serial where the two are close
OWN_ROUNDS = (5, 9, 15)  #: set sizes read with each workload's own spread


def residuals(results: list[dict]) -> dict[str, np.ndarray]:
    """By workload: log(auto / on) of each round where auto ended on a pipelined way, less the workload's median."""
    logs: dict[str, list[float]] = {}
    for result in results:
        for row in result.get("rows", []):
            if row.get("rank", 0) != 0:
                continue
            rates = row.get("rates") or {}
            for auto, on, ended in zip(rates.get("auto") or [], rates.get("on") or [], ended_on(row)):
                if auto and on and ended not in ("none", "serial"):
                    logs.setdefault(row["workload"], []).append(float(np.log(auto / on)))
    return {w: np.asarray(v) - np.median(v) for w, v in sorted(logs.items()) if len(v) >= 3}


def _sets(noise: np.ndarray, k: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` sets of ``k`` rounds' log-ratio noise, drawn from ``noise`` with replacement."""
    return rng.choice(noise, size=(draws, k), replace=True)


def chance_of_mark(noise: np.ndarray, true: float, k: int, mark: float, draws: int, rng: np.random.Generator) -> float:
    """The chance that the median of ``k`` rounds of ratio ``true * exp(noise)`` is at least ``mark``."""
    return float(np.mean(np.median(_sets(noise, k, draws, rng), axis=1) >= np.log(mark / true)))


def chance_of_floor(noise: np.ndarray, true: float, k: int, floor: float, draws: int,
                    rng: np.random.Generator) -> float:
    """The chance that none of ``k`` rounds of ratio ``true * exp(noise)`` falls below ``floor``."""
    return float(np.mean(np.min(_sets(noise, k, draws, rng), axis=1) >= np.log(floor / true)))


def _pct(ratio: float) -> int:
    """A ratio as a key without a dot (0.99 -> 99), so that a figure's JSON path can name it."""
    return round(ratio * 100)


def spread(noise: np.ndarray) -> float:
    """The robust standard deviation of the ratio's log: 1.4826 times the median absolute residual."""
    return float(1.4826 * np.median(np.abs(noise - np.median(noise))))


def measure(noise_by_workload: dict[str, np.ndarray], mark: float, floor: float, workloads: int, draws: int,
            seed: int) -> dict:
    noise = np.concatenate(list(noise_by_workload.values()))
    rng = np.random.default_rng(seed)
    rows = []
    for k in ROUNDS:
        row: dict = {"rounds": k}
        for t in TRUE_X_ON:
            p = chance_of_mark(noise, t, k, mark, draws, rng)
            row[f"mark_{_pct(t)}"], row[f"mark_all_{_pct(t)}"] = p, p ** workloads
        for s in TRUE_X_SERIAL:
            row[f"floor_{_pct(s)}"] = chance_of_floor(noise, s, k, floor, draws, rng)
        rows.append(row)
    by_workload = {}
    for w, own in noise_by_workload.items():  # each workload with its own spread (host-bound ones spread most)
        by_workload[w] = {"rounds": int(own.size), "spread": spread(own),
                          **{f"mark_{k}": chance_of_mark(own, TRUE_X_ON[0], k, mark, draws, rng) for k in OWN_ROUNDS}}
    own_all = {k: float(np.prod([v[f"mark_{k}"] for v in by_workload.values()])) for k in OWN_ROUNDS}
    return {"rounds_read": int(noise.size), "spread": spread(noise), "by_workload": by_workload,
            "own_all": own_all, "rows": rows}


def markdown(result: dict, mark: float, floor: float, workloads: int, draws: int, cmd: str) -> str:
    head = ["| rounds"] + [f"mark met, true {t}x on | all {workloads} met, {t}x" for t in TRUE_X_ON] + \
           [f"floor held, true {s}x serial" for s in TRUE_X_SERIAL]  # each header unique: figures pick by it
    lines = [f"# mark_power ({now()})", "", f"`{cmd}`  ",
             f"code {code_version()}; {result['rounds_read']} rounds of auto ended on mode=\"on\"'s way beside a "
             f"mode=\"on\" run; the ratio's spread between two runs of one round (robust SD of its log): "
             f"{result['spread']:.1%} over all workloads; chances from {draws} seeded draws each; "
             f"mark: median >= {mark}, floor: no round below {floor}", "",
             " | ".join(head) + " |", "|" + " ---: |" * (1 + 2 * len(TRUE_X_ON) + len(TRUE_X_SERIAL))]
    for r in result["rows"]:
        cells = [str(r["rounds"])]
        for t in TRUE_X_ON:
            cells += [f"{r[f'mark_{_pct(t)}']:.0%}", f"{r[f'mark_all_{_pct(t)}']:.0%}"]
        cells += [f"{r[f'floor_{_pct(s)}']:.0%}" for s in TRUE_X_SERIAL]
        lines.append("| " + " | ".join(cells) + " |")
    t = TRUE_X_ON[0]
    lines += ["", f"Each workload with its own spread (its rounds resampled), true {t}x on:", "",
              "| workload | rounds read | spread | " + " | ".join(f"mark met in {k} rounds" for k in OWN_ROUNDS) + " |",
              "| --- | ---: | ---: |" + " ---: |" * len(OWN_ROUNDS)]
    for w, v in result["by_workload"].items():
        lines.append(f"| {w} | {v['rounds']} | {v['spread']:.1%} | "
                     + " | ".join(f"{v[f'mark_{k}']:.0%}" for k in OWN_ROUNDS) + " |")
    lines.append(f"| all {len(result['by_workload'])} | | | "
                 + " | ".join(f"{result['own_all'][k]:.0%}" for k in OWN_ROUNDS) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks mark-power", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="pipeline_runs-*.json results (globs are expanded)")
    p.add_argument("--tag", required=True)
    p.add_argument("--mark", type=float, default=0.97)
    p.add_argument("--floor", type=float, default=0.95)
    p.add_argument("--workloads", type=int, default=9, help="how many workloads must all meet the mark")
    p.add_argument("--draws", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(results_dir(__file__)))
    args = p.parse_args(argv)
    try:
        results = read_results(expand(args.files))
    except ValueError as e:
        print(f"mark-power: {e}", file=sys.stderr)
        return 1
    noise = residuals(results)
    if not noise:
        print("mark-power: no workload has 3 rounds of auto on a pipelined way beside mode=\"on\"", file=sys.stderr)
        return 1
    result = measure(noise, args.mark, args.floor, args.workloads, args.draws, args.seed)
    cmd = command("mark_power.py")
    text = markdown(result, args.mark, args.floor, args.workloads, args.draws, cmd)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"mark_power-{args.tag}")
    with open(base + ".md", "w") as f:
        f.write(text)
    with open(base + ".json", "w") as f:
        json.dump({"benchmark": "mark_power", "date": now(), "command": cmd, "code": code_version(),
                   "mark": args.mark, "floor": args.floor, "workloads": args.workloads, "draws": args.draws,
                   **result}, f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
