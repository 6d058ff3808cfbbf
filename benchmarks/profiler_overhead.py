"""What profiling costs whole training runs: no profiler against ``profiler="streamprof"`` (and, in fewer rounds,
``StreamProfiler(with_stack=True, profile_memory=True, record_shapes=True)`` and Lightning's ``PyTorchProfiler``),
in alternated rounds, each run in a process of its own (``overhead_run.py``), with the profiler's stated cost beside
the measured loss.

    python -m benchmarks profiler-overhead --workloads vit:64:bf16,seg:32 --steps 2000 --rounds 7 --extra-rounds 3
    python -m benchmarks profiler-overhead --workloads vit:4:bf16,seg:2 --steps 50 --rounds 2 --extra-rounds 1 \\
        --image-size 32 --arch vit_tiny_patch16_224 --workers 0 --threads 1 --tag cpu-tiny   # CPU, tiny sizes

Workloads (``name:batch[:precision]``; ``overhead_run.py`` has them): ``vit``, a frozen timm ViT linear probe
(host-bound at batch 64 in bf16-mixed on an H200), ``seg``, the seed's frozen-backbone segmentation on resident
data (a loader of 4 workers feeds it: host-bound on an H200, 23% GPU utilization in its windows at batch 32), and
``segdev``, the same model on batches already on the device (no loader). A round runs every configuration due once
per workload, the order reversed every other round and the workloads' order too, so that the host's drift falls on
all alike; ``--rounds`` rounds hold the core
configurations (``--configs``), the first ``--extra-rounds`` also the others (``--extra-configs``; the last ones
with ``--extras-last``).

``--configs none,streamprof-late`` runs, per round, the default options with one window at the middle of the run
beside no profiler: the late window's run's median step after the window over its median step before it, against the
same ratio without a profiler, says what a window leaves behind for the steps that follow it (inside each run, free
of the host's drift between runs; ``_aftermath.py``).

Each run is one line of ``<out>/profiler_overhead-<tag>.jsonl``, written as it ends (machine, date, command and code
version with it); ``<out>/profiler_overhead-<tag>.md`` is rewritten after each. A later call with the same file
(``--resume FILE`` copies one in first) adds the rounds still missing, so rounds spread over several calls of a
time-limited machine add up: ``--time-limit`` starts a round's runs of a workload only when all of them should end
in time (each run expected to take as long as its configuration's last run), and a round that would not fit leaves
the time to a later, smaller one.

The table gives, per workload and configuration, the median steps/s, the median of the per-round ratios to no
profiler (each round's run against that round's run without a profiler) with their spread, the same for the whole fit
(the profiler's end of stage included), the profiler's stated cost beside the measured loss (1 - ratio) and beside
what each run's own clock measures (the steps of its windows and exports beyond the median of its steps between
windows, as a share of its timed steps: free of the host's drift between runs, blind to an effect on the steps
between windows, which the column after it and the ``streamprof-idle`` control show), and the windows written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _aftermath import lingering  # noqa: E402
from _record import code_version, command, machine, machine_line, now, results_dir  # noqa: E402

PRECISIONS = {"32": "32-true", "bf16": "bf16-mixed", "16": "16-mixed"}
DEFAULT_PRECISION = {"vit": "bf16", "seg": "32", "segdev": "32"}
CHILD = os.path.join(HERE, "overhead_run.py")
BASE = "none"
GOAL = 0.99  # the default profiler's median ratio to no profiler, on every workload
STATED_WITHIN = 0.01  # the stated cost within 1 percentage point of the measured loss
Z95 = 1.96  # the normal quantile of a two-sided 95% interval


def parse_workloads(text: str) -> list[tuple[str, int, str]]:
    out = []
    for item in text.split(","):
        name, batch, *rest = item.split(":")
        out.append((name, int(batch), PRECISIONS[rest[0] if rest else DEFAULT_PRECISION.get(name, "32")]))
    return out


def workload_key(name: str, batch: int, precision: str) -> str:
    return f"{name}:{batch}:{precision}"


def load(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plan(rows: list[dict], workloads: list[tuple[str, int, str]], configs: list[str], extras: list[str],
         rounds: int, extra_rounds: int, extras_last: bool = False) -> list[tuple[int, tuple[str, int, str], str]]:
    """The runs still missing, in order: ``(round, workload, config)``; the extra configurations in the first
    ``extra_rounds`` rounds, or in the last ones with ``extras_last``."""
    extra = range(rounds - extra_rounds, rounds) if extras_last else range(extra_rounds)
    done = {(r["round"], r["workload"], r["config"]) for r in rows if "rate" in r}
    todo = []
    for rnd in range(rounds):
        order = workloads if rnd % 2 == 0 else workloads[::-1]
        for spec in order:
            due = configs + (extras if rnd in extra else [])
            for config in (due if rnd % 2 == 0 else due[::-1]):
                if (rnd, workload_key(*spec), config) not in done:
                    todo.append((rnd, spec, config))
    return todo


def run_one(rnd: int, spec: tuple[str, int, str], config: str, args: argparse.Namespace, timeout: float) -> dict:
    name, batch, precision = spec
    child = {"workload": name, "batch": batch, "precision": precision, "image_size": args.image_size,
             "arch": args.arch, "workers": args.workers, "threads": args.threads, "steps": args.steps,
             "config": config}
    started = time.perf_counter()
    row = {"round": rnd, "workload": workload_key(*spec), "config": config}
    try:
        proc = subprocess.run([sys.executable, CHILD, json.dumps(child)], capture_output=True, text=True,
                              timeout=timeout)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode == 0 and lines:
            row.update(json.loads(lines[-1]))
        else:
            row["error"] = f"exit {proc.returncode}: {proc.stderr.strip()[-1500:]}"
    except subprocess.TimeoutExpired:
        row["error"] = f"did not finish within {timeout:.0f} s"
    row["wall_s"] = time.perf_counter() - started
    return row


def summarise(rows: list[dict]) -> list[dict]:
    """Per workload and configuration: medians and the per-round ratios to no profiler."""
    ok = [r for r in rows if "rate" in r]
    base = {(r["round"], r["workload"]): r for r in ok if r["config"] == BASE}
    out = []
    for workload in dict.fromkeys(r["workload"] for r in ok):
        for config in dict.fromkeys(r["config"] for r in ok if r["workload"] == workload):
            mine = [r for r in ok if r["workload"] == workload and r["config"] == config]
            paired = [(r, base[(r["round"], workload)]) for r in mine if (r["round"], workload) in base]
            entry = {"workload": workload, "config": config, "runs": len(mine),
                     "median_steps_per_s": statistics.median(r["rate"] for r in mine)}
            if config != BASE and paired:
                ratios = [r["rate"] / b["rate"] for r, b in paired]
                fit = [r["fit_rate"] / b["fit_rate"] for r, b in paired]
                entry.update(rounds=len(paired), ratio=_spread(ratios), fit_ratio=_spread(fit))
                stated = [r["stated_fraction"] for r, _ in paired if r.get("stated_fraction") is not None]
                if stated:
                    gaps = [r["stated_fraction"] - (1 - r["rate"] / b["rate"]) for r, b in paired
                            if r.get("stated_fraction") is not None]
                    entry.update(stated=statistics.median(stated), measured_loss=1 - entry["ratio"]["median"],
                                 stated_minus_measured=statistics.median(gaps))
                within = [own_clock_share(r) for r, _ in paired if r.get("watched_steps") and r.get("steps")]
                if within:
                    entry["within_run"] = statistics.median(within)
                between = [r["between_windows_step_ms"] / b["between_windows_step_ms"] for r, b in paired
                           if r.get("between_windows_step_ms") and b.get("between_windows_step_ms")]
                if between:
                    entry["between_windows_vs_none"] = statistics.median(between)
                if config == "streamprof-late":
                    after = lingering([r.get("after_before") for r, _ in paired],
                                      [b.get("after_before") for _, b in paired])
                    if after:
                        entry["lingering"] = _spread(after)
            for key in ("windows", "trace_files"):
                values = [r[key] for r in mine if r.get(key) is not None]
                if values:
                    entry[key] = values
            util = [r["gpu_utilization"] for r in mine if r.get("gpu_utilization") is not None]
            if util:
                entry["gpu_utilization"] = statistics.median(util)
            for key in ("first_window_parts_s", "first_window_calls_s"):  # each part's median over the runs
                parts = [r[key] for r in mine if r.get(key)]
                if parts:
                    entry[key] = {k: statistics.median(p.get(k, 0.0) for p in parts) for k in parts[0]}
            out.append(entry)
    return out


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def render(rows: list[dict], summary: list[dict], meta: dict) -> str:
    lines = [f"# profiler_overhead ({meta['device']}, {meta['date'][:10]})", "",
             f"`{meta['command']}`  ", f"{machine_line(meta['machine'])}; torch {meta['torch']}, lightning "
             f"{meta['lightning']}; code {meta['code']}; {meta['steps']} steps per run, timed from step 10; "
             f"{len([r for r in rows if 'rate' in r])} runs over {len({r['round'] for r in rows})} rounds", "",
             "| workload | config | rounds | median steps/s | ratio to no profiler: median (min-max) | whole fit: "
             "median (min-max) | stated cost | measured loss | windows' excess, run's clock | stated - measured | "
             "steps between windows vs none | GPU util. in windows | windows |",
             "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for e in summary:
        ratio, fit = e.get("ratio"), e.get("fit_ratio")
        lines.append("| " + " | ".join([
            e["workload"], e["config"], str(e.get("rounds", e["runs"])), f"{e['median_steps_per_s']:.1f}",
            f"{ratio['median']:.3f}x ({ratio['min']:.3f}-{ratio['max']:.3f})" if ratio else "",
            f"{fit['median']:.3f}x ({fit['min']:.3f}-{fit['max']:.3f})" if fit else "",
            _pct(e.get("stated")), _pct(e.get("measured_loss")), _pct(e.get("within_run")),
            _pct(e.get("stated_minus_measured"), sign=True),
            f"{e['between_windows_vs_none']:.3f}x" if e.get("between_windows_vs_none") else "",
            _pct(e.get("gpu_utilization")), str(e.get("windows", e.get("trace_files", ""))),
        ]) + " |")
    lines += ["", *verdicts(summary)]
    firsts = [e for e in summary if e.get("first_window_parts_s")]
    if firsts:
        lines += ["", "Where the first window's cost went (medians over the runs, seconds): the profiler's own time in "
                  "the training thread (of it Kineto's prepare, start and stop), the slower warm-up and recorded "
                  "steps, the steps of its export:"]
        for e in firsts:
            parts, calls = e["first_window_parts_s"], e.get("first_window_calls_s") or {}
            said = ", ".join(f"{k} {v:.3f}" for k, v in calls.items())
            lines.append(f"- {e['workload']} {e['config']}: profiler {parts['profiler']:.3f}"
                         f"{f' ({said})' if said else ''}, steps {parts['steps']:.3f}, export {parts['export']:.3f}")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines += ["", "Runs that failed:", *(f"- round {r['round']} {r['workload']} {r['config']}: "
                                             f"{r['error'].splitlines()[-1][:300]}" for r in errors)]
    return "\n".join(lines) + "\n"


def verdicts(summary: list[dict]) -> list[str]:
    """One line per workload: the default profiler against the goal, and its stated cost against the loss."""
    out = []
    for e in summary:
        if e["config"] != "streamprof" or "ratio" not in e:
            continue
        meets = e["ratio"]["median"] >= GOAL
        line = (f"- {e['workload']}: `profiler=\"streamprof\"` runs at {e['ratio']['median']:.3f}x of no profiler "
                f"(median of {e['rounds']} rounds; {'meets' if meets else 'misses'} {GOAL:.2f}x)")
        if "stated_minus_measured" in e:
            close = abs(e["stated_minus_measured"]) <= STATED_WITHIN
            line += (f"; its stated cost is {100 * e['stated_minus_measured']:+.1f} points from the measured loss "
                     f"({'within' if close else 'beyond'} 1 point)")
        if "within_run" in e and "stated" in e:
            gap = e["stated"] - e["within_run"]
            line += (f"; by each run's own clock its windows' and exports' steps took {100 * e['within_run']:.1f}% "
                     f"of the training time beyond the run's steps between windows, {100 * gap:+.1f} points from the "
                     f"stated cost ({'within' if abs(gap) <= STATED_WITHIN else 'beyond'} 1 point)")
        out.append(line)
        needed = rounds_for_one_point(e["ratio"]["values"])
        if needed is not None:
            out.append(f"- {e['workload']}: the per-round ratios spread by {100 * needed[0]:.1f}% (standard "
                       f"deviation of their logarithms): a whole-run answer within {100 * STATED_WITHIN:.0f} point at "
                       f"95% confidence needs about {needed[1]:,} rounds on this host")
    for e in summary:  # a window at the middle of the run: do the steps after it run slower than those before?
        if "lingering" in e:
            r = e["lingering"]
            out.append(f"- {e['workload']}: after a window at the middle of the run (`streamprof-late`), the run's "
                       f"median step over its median step before the window is {r['median']:.3f}x ({r['min']:.3f}-"
                       f"{r['max']:.3f}, {len(r['values'])} rounds) of the same ratio in the round's run without a "
                       "profiler: what a window leaves behind, which the budget does not charge")
    for e in summary:  # the control: the profiler in the run, no window; its ratio is the whole-run noise here
        if e["config"] == "streamprof-idle" and "ratio" in e:
            r = e["ratio"]
            out.append(f"- {e['workload']}: the profiler with no window (`streamprof-idle`) runs at {r['median']:.3f}x "
                       f"of no profiler ({r['min']:.3f}-{r['max']:.3f}, {e['rounds']} rounds): what this host's "
                       "drift does to a whole run's ratio when the profiler records nothing")
    return out


def own_clock_share(row: dict) -> float:
    """What the run's own clock charges its windows and exports: their steps' time beyond the median step between
    windows, as a share of the run's timed steps."""
    return row["watched_excess_s"] * row["rate"] / row["steps"]


def rounds_for_one_point(ratios: list[float]) -> tuple[float, int] | None:
    """The spread of the per-round ratios (standard deviation of their logarithms) and the rounds that would put the
    mean ratio within ``STATED_WITHIN`` of its true value at 95% confidence; None with fewer than 3 rounds."""
    if len(ratios) < 3:
        return None
    spread = statistics.stdev(math.log(r) for r in ratios)
    return spread, math.ceil((Z95 * spread / STATED_WITHIN) ** 2)


def _pct(x: float | None, sign: bool = False) -> str:
    return "" if x is None else (f"{100 * x:+.1f}%" if sign else f"{100 * x:.1f}%")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="vit:64:bf16,seg:32")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7, help="rounds of the core configurations")
    p.add_argument("--extra-rounds", type=int, default=3, help="rounds that also run the extra configurations")
    p.add_argument("--configs", default="none,streamprof")
    p.add_argument("--extra-configs", default="streamprof-full,pytorch")
    p.add_argument("--extras-last", action="store_true", help="the extra configurations in the last rounds")
    p.add_argument("--image-size", type=int, default=None, help="default: 224 (vit), 256 (seg)")
    p.add_argument("--arch", default="vit_small_patch16_224", help="the timm model of the vit workload")
    p.add_argument("--workers", type=int, default=4, help="DataLoader workers")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads in each run (0: torch's default)")
    p.add_argument("--time-limit", type=float, default=None, help="seconds; no run starts that would end later")
    p.add_argument("--run-timeout", type=float, default=400.0, help="seconds one run may take")
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--tag", default=None, help="result file names (default: machine and date)")
    p.add_argument("--resume", default=None, help="a result file (.jsonl) to continue (copied into --out first)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    import lightning
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
    tag = args.tag or f"{'h200' if 'H200' in device else 'cpu'}-{now()[:10].replace('-', '')}"
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"profiler_overhead-{tag}.jsonl")
    if args.resume and os.path.abspath(args.resume) != os.path.abspath(path) and os.path.exists(args.resume):
        shutil.copyfile(args.resume, path)
    rows = load(path)
    meta = {"device": device, "date": now(), "command": command("profiler_overhead.py"), "machine": machine(),
            "torch": torch.__version__, "lightning": lightning.__version__, "code": code_version(),
            "steps": args.steps}
    workloads = parse_workloads(args.workloads)
    todo = plan(rows, workloads, args.configs.split(","), [c for c in args.extra_configs.split(",") if c],
                args.rounds, args.extra_rounds, args.extras_last)
    print(f"profiler_overhead: {len(rows)} runs in {path}, {len(todo)} to go", flush=True)
    took: dict[tuple[str, str], float] = {}
    for r in rows:
        took[(r["workload"], r["config"])] = r.get("wall_s", 0.0)
    groups: dict[tuple[int, tuple[str, int, str]], list[str]] = {}
    for rnd, spec, config in todo:  # a round's runs of one workload go together, in their order
        groups.setdefault((rnd, spec), []).append(config)
    skipped = []
    for (rnd, spec), configs in groups.items():
        # a group starts only when all of its runs should end in time; one that would not leaves the time to a
        # later, smaller one (a round without the extra configurations), and a later call to itself
        expected = sum(took.get((workload_key(*spec), c), 60.0) for c in configs)
        if args.time_limit is not None and time.perf_counter() - started + expected > args.time_limit:
            skipped.append(f"round {rnd} of {workload_key(*spec)} ({expected:.0f} s expected)")
            continue
        for config in configs:
            row = run_one(rnd, spec, config, args, args.run_timeout)
            row.update(date=now(), device=device, machine=meta["machine"], command=meta["command"],
                       code=meta["code"])
            took[(row["workload"], config)] = row["wall_s"]
            rows.append(row)
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: row.get(k) for k in ("round", "workload", "config", "rate", "stated_fraction",
                                                      "windows", "wall_s", "error")}), flush=True)
            with open(path.removesuffix(".jsonl") + ".md", "w") as f:
                f.write(render(rows, summarise(rows), meta))
    if skipped:
        print(f"profiler_overhead: time limit; left for a later call: {', '.join(skipped)}", flush=True)
    text = render(rows, summarise(rows), meta)
    with open(path.removesuffix(".jsonl") + ".md", "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
