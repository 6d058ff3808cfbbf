"""How fast (and in how much memory) a large Kineto trace is read: our reader and analysis vs json.load and peers.

A trace of at least ``--events`` events is built by replicating a real H200 trace (``--trace replicated``, the
default: timestamps shifted by the window length per copy; External ids, correlations, Python ids, flow ids and
ProfilerStep numbers shifted so the copies stay consistent; the ``with_stack`` source makes it mostly Python
frames), or generated with a real run's event mix (``--trace synthetic``: kernels, runtime calls, nested
operators, memory events; see ``synthetic_trace.py``), and written as ``.json`` and ``.json.gz``. Each measurement runs in its own subprocess,
which reports its wall time and peak RSS. Peers (HTA, torch-tb-profiler) run in the ``.venv-peers`` virtualenv
(``python3 -m venv .venv-peers && .venv-peers/bin/pip install HolisticTraceAnalysis torch-tb-profiler==0.4.3``);
a peer that is missing or fails is reported with its error.

    python -m benchmarks analysis-speed [--events N] [--trace replicated|synthetic] [--skip-peers] [--repeat R]
        [--source TRACE] [--baseline DIR] [--tag TAG] [--out DIR]

Our tools and ``json.load`` run ``--repeat`` times (median seconds, highest peak reported); peers run once.
``--baseline DIR`` also measures read + analysis with the ``lightning_streamprof`` of another checkout (e.g. an
earlier commit extracted with ``git archive``) on the same trace, for before/after comparisons on one machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import math
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import code_version, invocation, machine, results_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT / "tests" / "fixtures" / "traces" / "frozen_backbone_memory_stack.pt.trace.json.gz"
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
TIME_LIMIT_S = 15 * 60
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_ARGS = ("External id", "correlation", "Python id", "Python parent id")


# ---------------------------------------------------------------- building the trace
def _shift_ids(args: dict, offset: int) -> dict:
    out = dict(args)
    for key in _ID_ARGS:
        if isinstance(out.get(key), int) and out[key] >= 0:
            out[key] += offset
    return out


def build_trace(source: Path, n_events: int, out_dir: Path) -> tuple[Path, Path, int]:
    """Write ``big.pt.trace.json`` and ``.json.gz`` with at least ``n_events`` events; returns paths and count."""
    import orjson

    doc = json.loads(gzip.decompress(source.read_bytes()))
    events = doc.pop("traceEvents")
    meta_events = [ev for ev in events if ev.get("ph") == "M"]
    body = [ev for ev in events if ev.get("ph") != "M"]
    starts = [ev["ts"] for ev in body if "ts" in ev]
    window = max(ev["ts"] + ev.get("dur", 0) for ev in body if "ts" in ev) - min(starts) + 1000.0
    ids = [v for ev in body for v in [ev.get("id"), *(ev.get("args", {}).get(k) for k in _ID_ARGS)]
           if isinstance(v, int)]
    id_span = max(ids) + 1
    steps = [int(m.group(1)) for ev in body if (m := _STEP.match(str(ev.get("name", ""))))]
    step_span = max(steps) - min(steps) + 1 if steps else 0
    copies = max(1, math.ceil((n_events - len(meta_events)) / len(body)))
    total = len(meta_events) + copies * len(body)

    head = orjson.dumps(doc, option=orjson.OPT_INDENT_2)[:-2] + b',\n  "traceEvents": [\n'
    json_path, gz_path = out_dir / "big.pt.trace.json", out_dir / "big.pt.trace.json.gz"
    sep = b",\n"
    with open(json_path, "wb") as f:
        f.write(head)
        f.write(sep.join(orjson.dumps(ev, option=orjson.OPT_INDENT_2) for ev in meta_events))
        for copy in range(copies):
            out = []
            for ev in body:
                ev = dict(ev)
                if "ts" in ev:
                    ev["ts"] = round(ev["ts"] + copy * window, 3)
                if isinstance(ev.get("id"), int):
                    ev["id"] += copy * id_span
                if isinstance(ev.get("args"), dict):
                    ev["args"] = _shift_ids(ev["args"], copy * id_span)
                m = _STEP.match(str(ev.get("name", "")))
                if m:
                    ev["name"] = f"ProfilerStep#{int(m.group(1)) + copy * step_span}"
                out.append(orjson.dumps(ev, option=orjson.OPT_INDENT_2))
            f.write(sep + sep.join(out))
        f.write(b"\n  ],\n  \"traceName\": \"big.pt.trace.json\"\n}\n")
    _gzip_file(json_path, gz_path)
    return json_path, gz_path, total


def _gzip_file(src: Path, dst: Path) -> None:
    try:
        from isal import igzip as gz
    except ImportError:
        gz = gzip
    with open(src, "rb") as fin, gz.open(dst, "wb", compresslevel=1) as fout:
        while block := fin.read(16 << 20):
            fout.write(block)


# ---------------------------------------------------------------- one measurement (child process)
def _child(tool: str, path: str) -> None:
    note = ""
    if tool == "read":
        from lightning_streamprof.trace import read_trace

        t0 = time.perf_counter()
        n = len(read_trace(path))
    elif tool == "analysis":
        from lightning_streamprof.trace import read_trace

        try:
            from lightning_streamprof.analysis import analyze_table
        except ImportError:
            analyze_table = None
            note = "lightning_streamprof.analysis.analyze_table does not exist yet: read only"
        else:
            note = "read_trace + analysis.analyze_table"
        t0 = time.perf_counter()
        table = read_trace(path)
        if analyze_table is not None:
            analyze_table(table)
        n = len(table)
    elif tool == "analysis-only":
        from lightning_streamprof.analysis import analyze_table
        from lightning_streamprof.trace import read_trace

        table = read_trace(path)
        t0 = time.perf_counter()
        analyze_table(table)
        n = len(table)
        note = "analysis.analyze_table of a table already read"
    elif tool == "json.load":
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            n = len(json.load(f)["traceEvents"])
    elif tool == "hta":
        from hta.trace_analysis import TraceAnalysis

        t0 = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=path)
        breakdown = analysis.get_temporal_breakdown(visualize=False)
        n = len(breakdown)
        note = "TraceAnalysis(trace_dir) + get_temporal_breakdown()"
    elif tool == "tb-profiler":
        from torch_tb_profiler.profiler.data import RunProfileData
        from torch_tb_profiler.profiler.run_generator import RunGenerator

        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            data = RunProfileData.parse("worker0", None, path, cache)
            RunGenerator("worker0", None, data).generate_run_profile()
            n = len(data.events)
        note = "RunProfileData.parse (process + analyze) + RunGenerator.generate_run_profile"
    else:
        raise SystemExit(f"unknown tool {tool}")
    seconds = time.perf_counter() - t0
    peak_kb = max(_hwm_kb(), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print("RESULT " + json.dumps({"seconds": seconds, "peak_mb": peak_kb / 1024, "count": n, "note": note}))


def _hwm_kb() -> int:
    """This process's peak RSS (VmHWM; ``ru_maxrss`` would include the parent's RSS inherited across exec)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def measure(python: str, tool: str, path: Path, timeout: float, code: Path = ROOT) -> dict:
    """Run one measurement in a fresh subprocess (importing the package from ``code``); failures come back
    with their error."""
    cmd = [python, str(Path(__file__).resolve()), "--child", tool, str(path)]
    env = {**os.environ, "PYTHONPATH": str(code)}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    except OSError as err:
        return {"error": f"could not start {python}: {err}"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}


def _repeated(python: str, tool: str, path: Path, timeout: float, times: int, code: Path = ROOT) -> dict:
    """``times`` measurements: median seconds, highest peak, every run's seconds; the first failure ends it."""
    runs = []
    for _ in range(times):
        result = measure(python, tool, path, timeout, code)
        if "error" in result:
            return result
        runs.append(result)
    return _summary(runs)


def _summary(runs: list[dict]) -> dict:
    """Several measurements as one: median seconds, highest peak, every run's seconds."""
    seconds = sorted(r["seconds"] for r in runs)
    return {**runs[0], "seconds": seconds[len(seconds) // 2], "peak_mb": max(r["peak_mb"] for r in runs),
            "runs_seconds": [r["seconds"] for r in runs]}


def _paired(python: str, tool: str, path: Path, timeout: float, times: int,
            codes: tuple[Path, Path]) -> tuple[dict, dict, list[float]]:
    """The same tool of two checkouts, alternated run by run (a shared machine drifts): both results and the
    per-round ratio of the first's seconds to the second's."""
    runs: tuple[list[dict], list[dict]] = ([], [])
    for i in range(times):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for k in order:
            result = measure(python, tool, path, timeout, codes[k])
            if "error" in result:
                return result, result, []
            runs[k].append(result)
    ratios = [a["seconds"] / b["seconds"] for a, b in zip(*runs)]
    return _summary(runs[0]), _summary(runs[1]), ratios


# ---------------------------------------------------------------- the run
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, default=results_dir(__file__))
    parser.add_argument("--timeout", type=float, default=TIME_LIMIT_S)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each of our tools and of json.load")
    parser.add_argument("--trace", choices=("replicated", "synthetic"), default="replicated")
    parser.add_argument("--baseline", type=Path, help="another checkout whose read + analysis is measured too")
    parser.add_argument("--tag", default="", help="appended to the result file names")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return

    command = " ".join([invocation(__file__), *map(shlex.quote, sys.argv[1:])])
    with tempfile.TemporaryDirectory(prefix="analysis_speed-") as tmp:
        tmp_dir = Path(tmp)
        t0 = time.perf_counter()
        if args.trace == "synthetic":
            json_path, gz_path, n_events = build_synthetic(args.events, tmp_dir)
        else:
            json_path, gz_path, n_events = build_trace(args.source, args.events, tmp_dir)
        print(f"built {n_events} events in {time.perf_counter() - t0:.0f} s: "
              f"{json_path.stat().st_size / 1e6:.0f} MB json, {gz_path.stat().st_size / 1e6:.0f} MB gz", flush=True)
        hta_dir = tmp_dir / "hta"
        hta_dir.mkdir()
        os.link(gz_path, hta_dir / "rank-0.pt.trace.json.gz")

        ours = sys.executable
        repeat = max(1, args.repeat)
        runs = [
            ("lightning_streamprof read_trace (.json.gz)", ours, "read", gz_path, repeat, ROOT),
            ("lightning_streamprof read_trace (.json)", ours, "read", json_path, repeat, ROOT),
            ("lightning_streamprof read + analysis (.json.gz)", ours, "analysis", gz_path, repeat, ROOT),
            ("lightning_streamprof analysis only", ours, "analysis-only", gz_path, repeat, ROOT),
        ]
        if args.baseline is not None:
            name = args.baseline.name
            runs += [(f"baseline read + analysis (.json.gz): {name}", ours, "analysis", gz_path, repeat, args.baseline),
                     (f"baseline analysis only: {name}", ours, "analysis-only", gz_path, repeat, args.baseline)]
        runs.append(("json.load (.json)", ours, "json.load", json_path, repeat, ROOT))
        if not args.skip_peers:
            peers = str(PEERS_PYTHON)
            runs += [
                ("HTA TraceAnalysis + temporal breakdown (.json.gz)", peers, "hta", hta_dir, 1, ROOT),
                ("torch-tb-profiler 0.4.3 loader (.json.gz)", peers, "tb-profiler", gz_path, 1, ROOT),
            ]
        results = []
        paired = None
        if args.baseline is not None:  # ours and the baseline alternated, read + analysis
            label = "lightning_streamprof read + analysis (.json.gz)"
            runs = [r for r in runs if r[0] != label and not r[0].startswith("baseline read + analysis")]
            print(f"{label} and the baseline's, alternated ...", flush=True)
            mine, theirs, ratios = _paired(ours, "analysis", gz_path, args.timeout, repeat, (ROOT, args.baseline))
            results += [{"tool": label, **mine},
                        {"tool": f"baseline read + analysis (.json.gz): {args.baseline.name}", **theirs}]
            paired = {"ratios": ratios, "median": sorted(ratios)[len(ratios) // 2] if ratios else None}
            print(f"  ours / baseline per round: {ratios}", flush=True)
        for label, python, tool, path, times, code in runs:
            print(f"{label} ...", flush=True)
            result = {"tool": label, **_repeated(python, tool, path, args.timeout, times, code)}
            print(f"  {result}", flush=True)
            results.append(result)

        base = next((r["seconds"] for r in results if r["tool"].startswith("json.load") and "seconds" in r), None)
        for r in results:
            if "seconds" in r and base:
                r["ratio_to_json_load"] = r["seconds"] / base
        report = {
            "benchmark": "analysis_speed",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(),
            "command": command,
            "trace": args.trace,
            "source_trace": os.path.relpath(args.source, ROOT) if args.trace == "replicated" else "synthetic_trace.py",
            "code": code_version(),
            "baseline": str(args.baseline) if args.baseline else None,
            "events": n_events,
            "json_bytes": json_path.stat().st_size,
            "gz_bytes": gz_path.stat().st_size,
            "time_limit_s": args.timeout,
            "results": results,
            "paired_read_analysis": paired,
        }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"analysis_speed-cpu-{dt.date.today():%Y%m%d}{args.tag}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    stem.with_suffix(".md").write_text(_markdown(report))
    print(_markdown(report))


def build_synthetic(n_events: int, out_dir: Path) -> tuple[Path, Path, int]:
    """``big.pt.trace.json`` and ``.json.gz`` generated with a real run's event mix (``synthetic_trace.py``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from synthetic_trace import synthetic_trace, write_trace

    doc = synthetic_trace(n_events)
    json_path, gz_path = out_dir / "big.pt.trace.json", out_dir / "big.pt.trace.json.gz"
    write_trace(doc, json_path)
    _gzip_file(json_path, gz_path)
    return json_path, gz_path, len(doc["traceEvents"])


def _markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"# analysis_speed ({report['date']})",
        "",
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}, {m['platform']}",
        f"- command: `{report['command']}`",
        f"- trace ({report.get('trace', 'replicated')}): {report['events']:,} events from `{report['source_trace']}`; "
        f"{report['json_bytes'] / 1e6:,.0f} MB as .json, {report['gz_bytes'] / 1e6:,.0f} MB as .json.gz",
        f"- code measured: {report.get('code', '?')}",
        f"- each run is its own subprocess (time limit {report['time_limit_s']:.0f} s); seconds: median of the runs "
        "(wall time of the read/analysis itself, imports excluded); peak MB: highest peak RSS (VmHWM) of the runs",
        "",
        "| tool | seconds | peak MB | ratio to json.load | runs (s) | note |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in report["results"]:
        if "error" in r:
            lines.append(f"| {r['tool']} | failed | | | | {r['error']} |")
        else:
            ratio = f"{r['ratio_to_json_load']:.2f}" if "ratio_to_json_load" in r else ""
            runs = ", ".join(f"{s:.2f}" for s in r.get("runs_seconds", [r["seconds"]]))
            cells = [r["tool"], f"{r['seconds']:.2f}", f"{r['peak_mb']:,.0f}", ratio, runs, r.get("note", "")]
            lines.append("| " + " | ".join(cells) + " |")
    paired = report.get("paired_read_analysis")
    if paired and paired.get("ratios"):
        lines += ["", "Read + analysis, ours and the baseline alternated run by run; ours / baseline per round: "
                  + ", ".join(f"{r:.3f}" for r in paired["ratios"]) + f" (median {paired['median']:.3f})"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
