"""The paired rounds of several ``pipeline-speed`` results, pooled by workload: ``mode="auto"`` against serial and
against ``mode="on"``, round by round, and whether auto meets its mark (its median per-round ratio at least
``--mark`` times the better of serial and ``on``, and no round below ``--floor`` times serial's).

    python -m benchmarks pool benchmarks/results/pipeline-speed/pipeline_runs-h200-i34-*.json --tag h200-i34

Only rounds that ran auto beside the fixed way are pooled (a ratio is taken within a round, never across files).
Writes ``benchmarks/results/pipeline-speed/pipeline_pool-<tag>.{md,json}``.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from benchmarks.suites import RESULTS

OUT = RESULTS / "pipeline-speed"


def ended_on(row: dict) -> list[str]:
    """The way each run of auto ended on, in round order: its last round's choice ("none": the run ended before auto
    chose); empty for results written before the rounds were kept."""
    runs = (row.get("auto_rounds_per_round") or {}).get("auto", [])
    return [rounds[-1]["choice"] if rounds else "none" for rounds in runs]


def pooled_rows(results: list[dict]) -> dict[str, dict]:
    """By workload: the per-round ratios auto/serial and auto/on, and the files and code versions they came from."""
    rows: dict[str, dict] = {}
    for result in results:
        for row in result.get("rows", []):
            if row.get("rank", 0) != 0:
                continue
            rates = row.get("rates") or {}
            auto = rates.get("auto")
            if not auto:
                continue
            pooled = rows.setdefault(row["workload"], {"serial": [], "on": [], "trial_share": [], "ways": [],
                                                       "sources": []})
            shares = (row.get("trial_share_per_round") or {}).get("auto", [])
            pooled["trial_share"] += [x for x in shares if x is not None]
            pooled["ways"] += ended_on(row)
            used = False
            for fixed in ("serial", "on"):
                for a, b in zip(auto, rates.get(fixed) or []):
                    if a and b:
                        pooled[fixed].append(a / b)
                        used = True
            if used:
                pooled["sources"].append(_source(result))
    return rows


def _source(result: dict) -> str:
    """A result's name with its code version, steps per run and machine: what its rounds are comparable by."""
    steps = (result.get("args") or {}).get("steps")
    facts = [result.get("code", "?")] + ([f"{steps} steps"] if steps else []) + (
        [result["device"]] if result.get("device") else [])
    return f"{result['name']} ({', '.join(facts)})"


def verdict(row: dict, mark: float, floor: float) -> dict:
    """Medians, the lowest round against serial, and whether the mark and the floor hold."""
    out: dict = {"rounds": {k: len(row[k]) for k in ("serial", "on")}}
    for fixed in ("serial", "on"):
        ratios = row[fixed]
        out[f"x_{fixed}"] = statistics.median(ratios) if ratios else None
        out[f"x_{fixed}_range"] = [min(ratios), max(ratios)] if ratios else None
    medians = [out[f"x_{k}"] for k in ("serial", "on") if out[f"x_{k}"] is not None]
    out["x_better"] = min(medians) if medians else None  # against the better fixed way: the lower ratio
    out["trial_share"] = statistics.median(row["trial_share"]) if row["trial_share"] else None  # inside each run
    out["ways"] = dict(sorted(Counter(row["ways"]).items())) or None  # None: results before they were recorded
    out["lowest_x_serial"] = min(row["serial"]) if row["serial"] else None
    out["meets_mark"] = out["x_better"] is not None and out["x_better"] >= mark
    # None: no round beside serial, so the floor is not measured (not "held")
    out["above_floor"] = None if out["lowest_x_serial"] is None else out["lowest_x_serial"] >= floor
    return out


def _mark(v: dict) -> str:
    """``met`` or ``missed``, naming the one fixed way it was read against when the other has no rounds."""
    word = "met" if v["meets_mark"] else "missed"
    timed = [k for k in ("serial", "on") if v["rounds"][k]]
    return word if len(timed) != 1 else f"{word} ({timed[0]} only)"


def _floor(v: dict) -> str:
    return "-" if v["above_floor"] is None else ("held" if v["above_floor"] else "broken")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _ways(ways: dict[str, int] | None) -> str:
    """``serial x2, thread+graph x3``: how many runs ended on each way; ``-`` when the results do not say."""
    return ", ".join(f"{way} x{n}" for way, n in ways.items()) if ways else "-"


def markdown(rows: dict[str, dict], verdicts: dict[str, dict], mark: float, floor: float, command: str,
             device: str) -> str:
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = [f"# pipeline_pool ({device}, {now:%Y-%m-%d})", "", f"`{command}`  ",
             f"paired rounds of `mode=\"auto\"` (StreamPipeline()) pooled by workload; each ratio is taken within one"
             f" round; mark: the median ratio >= {mark} against the better of serial and `on`, floor: no round"
             f" below {floor} x serial; trials: what auto's trials cost each run measured inside it (their steps"
             f" beyond the run's median step outside them, as a share of the run), the median over the rounds; auto"
             f" ended on: the way each run of auto ran at its end, by count", "",
             "| workload | rounds | auto x serial | range | auto x on | range | trials | mark | floor | auto ended on |",
             "| --- | ---: | ---: | --- | ---: | --- | ---: | --- | --- | --- |"]
    for name, v in verdicts.items():
        rs, ro = v["x_serial_range"], v["x_on_range"]
        lines.append(f"| {name} | {v['rounds']['serial']}/{v['rounds']['on']} | {_fmt(v['x_serial'])} |"
                     f" {_fmt(rs[0]) + '-' + _fmt(rs[1]) if rs else '-'} | {_fmt(v['x_on'])} |"
                     f" {_fmt(ro[0]) + '-' + _fmt(ro[1]) if ro else '-'} |"
                     f" {'-' if v['trial_share'] is None else format(v['trial_share'], '.2%')} |"
                     f" {_mark(v)} | {_floor(v)} |"
                     f" {_ways(v['ways'])} |")
    lines += ["", "Sources (code version, steps per run, machine):"]
    lines += [f"- {name}: " + ", ".join(rows[name]["sources"]) for name in verdicts]
    return "\n".join(lines) + "\n"


def expand(patterns: list[str]) -> list[Path]:
    """The files that ``patterns`` name, their globs expanded (a quoted one too), each once and sorted; a pattern
    that matches nothing stays as written, so that reading it names it."""
    return [Path(f) for f in sorted({f for pattern in patterns for f in (glob.glob(pattern) or [pattern])})]


def read_results(files: list[Path]) -> list[dict]:
    """Each file's ``pipeline_runs`` result with its ``name`` (the file's stem); ValueError naming a file that is
    not one."""
    results = []
    for f in files:
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{f}: not a readable JSON result ({e})") from None
        if not isinstance(data, dict) or data.get("benchmark") != "pipeline_runs":
            raise ValueError(f"{f}: not a pipeline_runs result")
        results.append({**data, "name": f.stem})
    return results


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks pool", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="pipeline_runs-*.json results (globs are expanded)")
    p.add_argument("--tag", required=True, help="file name tag of the pooled result")
    p.add_argument("--mark", type=float, default=0.97)
    p.add_argument("--floor", type=float, default=0.95)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    args.files = expand(args.files)
    try:
        results = read_results(args.files)
    except ValueError as e:
        print(f"pool: {e}", file=sys.stderr)
        return 1
    rows = pooled_rows(results)
    if not rows:
        print("pool: none of the files ran auto beside serial or on", file=sys.stderr)
        return 1
    verdicts = {name: verdict(row, args.mark, args.floor) for name, row in sorted(rows.items())}
    root = RESULTS.parent.parent
    command = "python -m benchmarks pool " + " ".join(
        str(f.resolve().relative_to(root)) if f.resolve().is_relative_to(root) else str(f)
        for f in args.files) + f" --tag {args.tag}"
    device = ", ".join(sorted({f"{r.get('devices', 1)} x {r.get('device', '?')}" for r in results}))
    text = markdown(rows, verdicts, args.mark, args.floor, command, device)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"pipeline_pool-{args.tag}.md").write_text(text)
    (args.out / f"pipeline_pool-{args.tag}.json").write_text(json.dumps(
        {"benchmark": "pipeline_pool", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "command": command, "machine": device, "mark": args.mark, "floor": args.floor,
         "workloads": {n: {**verdicts[n], "ratios": {k: rows[n][k] for k in ("serial", "on")},
                           "sources": rows[n]["sources"]} for n in verdicts}}, indent=1))
    print(text)
    return 0
