"""How precisely whole runs can tell what the profiler costs on a host: the series of ``profiler_overhead.py`` pooled
per workload and configuration, each run against its round's run without a profiler.

    python -m benchmarks overhead-noise benchmarks/results/profiler-overhead/profiler_overhead-h200-*.jsonl --tag h200
    python -m benchmarks overhead-noise benchmarks/results/pipeline-speed/pipeline_runs-h200-ldmsd-*.json --tag h200-pipelined

``pipeline_runs-*.json`` files give each profiled configuration (``auto+streamprof``, ...) against the same
configuration alone (``auto``) in its round: the profiler's cost with the pipeline on.

For each workload and configuration: the rounds, the median and the geometric mean of the per-round ratios to no
profiler with the mean's 95% interval (Student's t), the spread of the ratios (standard deviation of their
logarithms) and the rounds that a 1-point answer at 95% confidence needs at that spread; the profiler's stated cost
and what each run's own clock measures (the steps of its windows and exports beyond the median of its steps between
windows), which the host's drift between runs does not reach. Then the runs without a profiler against themselves:
the median step of a stretch after the middle of the run over that of a stretch before it (``_aftermath.py``), whose
spread is how much the host's speed moves within one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _profiled_configs import base_config  # noqa: E402
from _record import command, machine, machine_line, now  # noqa: E402
from profiler_overhead import Z95, own_clock_share, rounds_for_one_point  # noqa: E402
from suites import results_dir  # noqa: E402

#: Student's t at 97.5% for 1..30 degrees of freedom (a two-sided 95% interval of a mean of few rounds)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def paired(paths: list[str]) -> tuple[dict, list[float], list[str]]:
    """Per ``(workload, config)`` the rows paired with their round's run without a profiler (``(row, base)``), the
    no-profiler runs' within-run after/before ratios, and each file's series name and code."""
    pairs: dict[tuple[str, str], list[tuple[dict, dict]]] = {}
    within, series = [], []
    for path in paths:
        if path.endswith(".json"):
            series.append(pipeline_pairs(path, pairs))
            continue
        rows = [json.loads(line) for line in open(path) if line.strip()]
        rows = [r for r in rows if "rate" in r]
        name = os.path.basename(path).removeprefix("profiler_overhead-").removesuffix(".jsonl")
        series.append(f"{name} (code {', '.join(sorted({r.get('code', '?') for r in rows}))})")
        base = {(r["round"], r["workload"]): r for r in rows if r["config"] == "none"}
        within += [r["after_before"]["ratio"] for r in base.values() if r.get("after_before")]
        for r in rows:
            b = base.get((r["round"], r["workload"]))
            if r["config"] != "none" and b is not None:
                pairs.setdefault((r["workload"], r["config"]), []).append((r, b))
    return pairs, within, series


def pipeline_pairs(path: str, pairs: dict) -> str:
    """Adds a ``pipeline_runs.py`` result's profiled configurations, each paired per round with the same
    configuration alone (``auto+streamprof`` with ``auto``), to ``pairs``; returns the series' name and code."""
    with open(path) as f:
        result = json.load(f)
    for row in result["rows"]:
        for config, rates in row["rates"].items():
            alone = row["rates"].get(base_config(config))
            if config != base_config(config) and alone:
                pairs.setdefault((row["workload"], config), []).extend(
                    ({"rate": r}, {"rate": a}) for r, a in zip(rates, alone))
    name = os.path.basename(path).removeprefix("pipeline_runs-").removesuffix(".json")
    return f"{name} (code {result.get('code', '?')})"


def pooled(pairs: list[tuple[dict, dict]]) -> dict:
    """The per-round ratios' median, geometric mean with its 95% interval, spread and the rounds for 1 point."""
    ratios = [r["rate"] / b["rate"] for r, b in pairs]
    logs = [math.log(x) for x in ratios]
    out = {"rounds": len(ratios), "median": statistics.median(ratios), "geomean": math.exp(statistics.fmean(logs))}
    needed = rounds_for_one_point(ratios)
    if needed is not None:
        spread = needed[0]
        t = T975[len(logs) - 2] if len(logs) - 1 <= len(T975) else Z95
        half = t * spread / math.sqrt(len(logs))
        out.update(spread=spread, low=math.exp(statistics.fmean(logs) - half),
                   high=math.exp(statistics.fmean(logs) + half), needed=needed[1])
    stated = [r["stated_fraction"] for r, _ in pairs if r.get("stated_fraction") is not None]
    clock = [own_clock_share(r) for r, _ in pairs if r.get("watched_steps")]
    if stated:
        out["stated"] = statistics.median(stated)
    if clock:
        out["own_clock"] = statistics.median(clock)
    return out


def render(pairs: dict, within: list[float], series: list[str], meta: dict) -> str:
    lines = [f"# overhead_noise ({meta['date'][:10]})", "", f"`{meta['command']}`  ",
             f"read on {machine_line(meta['machine'])}; series: {'; '.join(series)}", "",
             "| workload | config | rounds | rate over the run without a profiler: median | geometric mean (95% "
             "interval) | spread (sd of log ratio) | rounds for 1 point | stated cost | windows' excess, run's clock |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for (workload, config), rows in sorted(pairs.items()):
        p = pooled(rows)
        interval = f"{p['geomean']:.3f}x ({p['low']:.3f}-{p['high']:.3f})" if "low" in p else f"{p['geomean']:.3f}x"
        lines.append("| " + " | ".join([
            workload, config, str(p["rounds"]), f"{p['median']:.3f}x", interval,
            f"{100 * p['spread']:.1f}%" if "spread" in p else "", f"{p['needed']:,}" if "needed" in p else "",
            f"{100 * p['stated']:.1f}%" if "stated" in p else "",
            f"{100 * p['own_clock']:.1f}%" if "own_clock" in p else ""]) + " |")
    if len(within) >= 3:
        spread = statistics.stdev(math.log(x) for x in within)
        lines += ["", f"Runs without a profiler against themselves ({len(within)} runs): the median step after the "
                  f"middle of the run over the median step before it is {min(within):.3f}-{max(within):.3f} (spread "
                  f"{100 * spread:.1f}%): the host's speed moves this much within one run, from one stretch of a few "
                  "seconds to the next."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="profiler_overhead-*.jsonl or pipeline_runs-*.json result files")
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--tag", default="h200")
    args = p.parse_args(argv)
    pairs, within, series = paired(args.files)
    meta = {"date": now(), "command": command("overhead_noise.py"), "machine": machine()}
    text = render(pairs, within, series, meta)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"overhead_noise-{args.tag}.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
