"""Our trace metrics against torch-tb-profiler 0.4.3's on the same Kineto traces.

    .venv/bin/python -m benchmarks compare-tb-profiler [TRACES ...] [--tbp-python .venv-tbp/bin/python] [--no-fail]

Default traces: ``tests/fixtures/traces/*.pt.trace.json.gz``, which include, once captured on a GPU, the two
Lightning-made traces of :data:`LIGHTNING_TRACES` (GPU augmentation in ``on_after_batch_transfer``, recorded by
Lightning's ``PyTorchProfiler`` and by ``StreamProfiler``); those absent are listed and skipped. torch-tb-profiler
runs in its own venv (``benchmarks/tbp_reference.py`` through ``--tbp-python``), in four modes: as released,
``corrected_ab`` (the two misreadings of recent-torch traces fixed: ``cuda_runtime``/``cuda_driver`` read as
Runtime, GPU-side ``ProfilerStep#N`` copies not counted as steps), ``corrected_dataloader`` (those two plus the
DataLoader ``user_annotation`` events kept) and ``corrected`` (those two plus every ``user_annotation`` kept, as
torch-tb-profiler's later code does; see tbp_reference.py). Ours runs in-process:
``lightning_streamprof.analysis.analyze_table(read_trace(path))`` encoded as its JSON.

Writes ``benchmarks/results/compare-tb-profiler/compare_tb_profiler-<YYYYMMDD>.json`` and ``.md``. Targets, against
``corrected``: GPU utilization, Est. SM efficiency and Est. achieved occupancy within 0.5 percentage points
per device; same step count; mean step time and every breakdown category within 2% of the (corrected)
mean step time. Exit status: 0 all targets met, 1 a target failed, 2 ours or the reference could not run;
``--no-fail`` always exits 0 (report only).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import gzip
import importlib
import json
import os
import platform
import shlex
import subprocess
import sys
import traceback

from _record import invocation, results_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_SCRIPT = os.path.join(ROOT, "benchmarks", "tbp_reference.py")
DEFAULT_TRACES = os.path.join(ROOT, "tests", "fixtures", "traces", "*.pt.trace.json.gz")
#: traces made by Lightning's loop (captured on a GPU; compared when present)
LIGHTNING_TRACES = tuple(os.path.join(ROOT, "tests", "fixtures", "traces", f"{name}.pt.trace.json.gz")
                         for name in ("lightning_pytorchprofiler_augment", "streamprof_augment"))
DEFAULT_TBP_PYTHON = os.path.join(ROOT, ".venv-tbp", "bin", "python")

GPU_METRICS = (("utilization", "GPU utilization"), ("sm_efficiency", "Est. SM efficiency"),
               ("achieved_occupancy", "Est. achieved occupancy"))
CATEGORIES = (("kernel", "Kernel"), ("memcpy", "Memcpy"), ("memset", "Memset"),
              ("communication", "Communication"), ("runtime", "Runtime"), ("dataloader", "DataLoader"),
              ("cpu_exec", "CPU Exec"), ("other", "Other"))
REFERENCE_MODES = ("released", "corrected_ab", "corrected_dataloader", "corrected")
TARGET_MODE = "corrected"
GPU_TOL = 0.005  # fraction: 0.5 percentage points
STEP_TOL = 0.02  # fraction of the mean step time


# --------------------------------------------------------------------------------------------- running
def run_reference(tbp_python: str, traces: list[str], timeout: float) -> tuple[dict, dict, str | None]:
    """(versions, {abs trace path: record}, error) from tbp_reference.py in the torch-tb-profiler venv."""
    cmd = [tbp_python, REFERENCE_SCRIPT, "--versions", *traces]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {}, {}, f"could not run {shlex.join(cmd)}: {exc}"
    versions, records = {}, {}
    for line in proc.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        if "versions" in obj:
            versions = obj["versions"]
        else:
            records[obj["trace"]] = obj
    error = None
    if proc.returncode != 0:
        error = f"tbp_reference.py exited {proc.returncode}: {proc.stderr.strip()[-2000:]}"
    return versions, records, error


def load_ours(spec: str):
    """The analysis callable: 'default' or 'module:function' (function(path) -> dict), for stubs."""
    if spec != "default":
        mod_name, _, func = spec.partition(":")
        return getattr(importlib.import_module(mod_name), func)
    from lightning_streamprof.analysis import analyze_table  # noqa: PLC0415 - may not exist yet
    from lightning_streamprof.results import to_builtins  # noqa: PLC0415
    from lightning_streamprof.trace import read_trace  # noqa: PLC0415

    def ours(path: str) -> dict:
        return to_builtins(analyze_table(read_trace(path)))

    return ours


def run_ours(fn, path: str) -> dict:
    out = fn(path)
    if isinstance(out, (str, bytes)):
        out = json.loads(out)
    return out


# ------------------------------------------------------------------------------------------ comparing
def _gpu_by_device(result: dict | None) -> dict:
    if not result or "gpu" not in result:
        return {}
    return {int(g["device"]): g for g in result["gpu"]}


def _sub(a, b):
    return None if a is None or b is None else a - b


def compare(ref: dict, ours: dict | None) -> dict:
    """Rows for one trace, plus failures (each a sentence) against the ``corrected`` reference."""
    modes = ref.get("modes", {})
    target = modes.get(TARGET_MODE, {})
    rows, failures = [], []

    # GPU metrics, per device of the corrected reference (plus any device only ours has)
    ref_gpus = {m: _gpu_by_device(modes.get(m)) for m in REFERENCE_MODES}
    our_gpus = _gpu_by_device(ours)
    devices = sorted(set(ref_gpus[TARGET_MODE]) | set(our_gpus))
    for dev in devices:
        for key, label in GPU_METRICS:
            vals = {m: ref_gpus[m].get(dev, {}).get(key) for m in REFERENCE_MODES}
            mine = our_gpus.get(dev, {}).get(key) if ours is not None else None
            diff = _sub(mine, vals[TARGET_MODE])
            ok = None
            if ours is not None:
                if vals[TARGET_MODE] is None and mine is None:
                    ok = True
                else:
                    ok = diff is not None and abs(diff) <= GPU_TOL
                if not ok:
                    failures.append(f"GPU {dev} {label}: ours {_pct(mine)} vs corrected {_pct(vals[TARGET_MODE])}"
                                    f" (diff {_pp(diff)}, tolerance 0.5 pp)")
            rows.append({"metric": f"GPU {dev} {label}", "key": f"gpu{dev}.{key}", "unit": "%",
                         **vals, "ours": mine, "diff": diff, "tolerance": GPU_TOL, "ok": ok})

    # steps
    ref_steps = {m: (modes.get(m) or {}).get("steps", {}) for m in REFERENCE_MODES}
    our_steps = (ours or {}).get("steps", {}) if ours is not None else {}
    step_ms = ref_steps[TARGET_MODE].get("mean_ms")
    tol_ms = None if step_ms is None else STEP_TOL * step_ms

    vals = {m: ref_steps[m].get("count") for m in REFERENCE_MODES}
    mine = our_steps.get("count") if ours is not None else None
    ok = None if ours is None else (mine == vals[TARGET_MODE])
    if ok is False:
        failures.append(f"step count: ours {mine} vs corrected {vals[TARGET_MODE]}")
    rows.append({"metric": "Step count", "key": "steps.count", "unit": "", **vals, "ours": mine,
                 "diff": _sub(mine, vals[TARGET_MODE]), "tolerance": 0, "ok": ok})

    def ms_row(metric, key, getter):
        vals = {m: getter(ref_steps[m]) for m in REFERENCE_MODES}
        mine = getter(our_steps) if ours is not None else None
        diff = _sub(mine, vals[TARGET_MODE])
        ok = None
        if ours is not None:
            ok = diff is not None and tol_ms is not None and abs(diff) <= tol_ms
            if not ok:
                failures.append(f"{metric}: ours {_ms(mine)} ms vs corrected {_ms(vals[TARGET_MODE])} ms "
                                f"(diff {_ms(diff)} ms = {_share(diff, step_ms)} of the step; "
                                f"tolerance {STEP_TOL:.0%})")
        rows.append({"metric": metric, "key": key, "unit": "ms", **vals, "ours": mine, "diff": diff,
                     "diff_share_of_step": None if diff is None or not step_ms else diff / step_ms,
                     "tolerance": tol_ms, "ok": ok})

    ms_row("Mean step time", "steps.mean_ms", lambda s: s.get("mean_ms"))
    for key, label in CATEGORIES:
        ms_row(f"{label}", f"steps.breakdown_ms.{key}", lambda s, k=key: (s.get("breakdown_ms") or {}).get(k))
    return {"rows": rows, "failures": failures}


# ------------------------------------------------------------------------------------------- formatting
def _pct(x):
    return "—" if x is None else f"{100 * x:.3f}%"


def _pp(x):
    return "—" if x is None else f"{100 * x:+.3f} pp"


def _ms(x):
    return "—" if x is None else f"{x:.4f}"


def _share(d, total):
    return "—" if d is None or not total else f"{100 * d / total:+.2f}%"


def _cell(row, value, diff=False):
    if row["unit"] == "%":
        return _pp(value) if diff else _pct(value)
    if row["unit"] == "ms":
        return "—" if value is None else (f"{value:+.4f}" if diff else f"{value:.4f}")
    return "—" if value is None else (f"{value:+d}" if diff else f"{value}")


def trace_info(path: str) -> dict:
    try:
        with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as fh:
            data = json.load(fh)
    except Exception as exc:  # noqa: BLE001
        return {"error": str(exc)}
    props = data.get("deviceProperties") or []
    return {"devices": sorted({p.get("name") for p in props if p.get("name")}),
            "events": len(data.get("traceEvents", [])),
            "distributedInfo": data.get("distributedInfo")}


def markdown(report: dict) -> str:
    out = [f"# compare_tb_profiler ({report['date']})", "",
           f"`{report['command']}`  ",
           f"machine: {report['machine']}  ",
           "ours: " + ", ".join(f"{k} {v}" for k, v in report["versions"]["ours"].items()) + "  ",
           "torch-tb-profiler venv: " + ", ".join(f"{k} {v}" for k, v in report["versions"]["tbp"].items()),
           "",
           "Columns: **released** = torch-tb-profiler 0.4.3 as published; **corrected (a+b)** = with "
           "`cuda_runtime`/`cuda_driver` read as Runtime and GPU-side `ProfilerStep#N` copies not counted as "
           "steps; **(a+b) + DataLoader** = (a+b) plus the DataLoader `user_annotation` events kept; "
           "**corrected** = (a+b) plus every `user_annotation` kept, as torch-tb-profiler's later code does "
           "(0.4.3 drops every `user_annotation` but ProfilerStep and collectives, so on recent torch its "
           "DataLoader is 0 and the time in `record_function` ranges such as Lightning's `[pl][profile]` actions "
           "is Other); **ours** = `analyze_table(read_trace(path))`; **diff** = ours − corrected.",
           "",
           "Targets (against corrected): GPU utilization, Est. SM efficiency, Est. achieved occupancy within "
           "0.5 percentage points per device; same step count; mean step time and each breakdown category "
           f"within {STEP_TOL:.0%} of the mean step time. Breakdown values are per-step means in ms.",
           ""]
    if report.get("ours_error"):
        out += [f"**Ours did not run**: `{report['ours_error'].splitlines()[-1]}`", ""]
    if report.get("reference_error"):
        out += [f"**Reference error**: `{report['reference_error'][-500:]}`", ""]
    verdict = {True: "PASS", False: "FAIL", None: "NOT CHECKED"}[report["pass"]]
    out += [f"**Overall: {verdict}**", ""]
    if report.get("skipped_absent"):
        out += ["Not captured yet, skipped: " + ", ".join(f"`{p}`" for p in report["skipped_absent"]), ""]
    for t in report["traces"]:
        info = t.get("trace_info", {})
        out += [f"## {os.path.relpath(t['trace'], ROOT)}", "",
                f"devices: {', '.join(info.get('devices') or ['?'])}; events: {info.get('events', '?')}", ""]
        if t.get("ours_error"):
            out += [f"ours failed: `{t['ours_error'].strip().splitlines()[-1]}`", ""]
        for m in REFERENCE_MODES:
            err = (t["reference"].get("modes", {}).get(m) or {}).get("error")
            if err:
                out += [f"reference {m} failed: `{err}`", ""]
        out += ["| metric | released | corrected (a+b) | (a+b) + DataLoader | corrected | ours | diff | ok |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | :-: |"]
        for r in t["rows"]:
            ok = {True: "✓", False: "✗", None: ""}[r["ok"]]
            diff = _cell(r, r["diff"], diff=True)
            if r["unit"] == "ms" and r.get("diff_share_of_step") is not None:
                diff += f" ({100 * r['diff_share_of_step']:+.2f}% of step)"
            out.append(f"| {r['metric']} | {_cell(r, r['released'])} | {_cell(r, r['corrected_ab'])} | "
                       f"{_cell(r, r['corrected_dataloader'])} | {_cell(r, r['corrected'])} | {_cell(r, r['ours'])} | "
                       f"{diff} | {ok} |")
        out.append("")
        steps = (t["reference"].get("modes", {}).get(TARGET_MODE) or {}).get("steps", {})
        if steps.get("per_step"):
            out += ["Corrected reference, per step (ms):", "",
                    "| step | total | " + " | ".join(lbl for _, lbl in CATEGORIES) + " |",
                    "| --- | ---: | " + " | ".join("---:" for _ in CATEGORIES) + " |"]
            for s in steps["per_step"]:
                out.append(f"| {s['name']} | {s['total_ms']:.4f} | "
                           + " | ".join(f"{s['breakdown_ms'][k]:.4f}" for k, _ in CATEGORIES) + " |")
            out.append("")
        if t["failures"]:
            out += ["Failed targets:", ""] + [f"- {f}" for f in t["failures"]] + [""]
    return "\n".join(out)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def our_versions() -> dict:
    out = {"python": platform.python_version()}
    try:
        from importlib.metadata import version  # noqa: PLC0415

        out["lightning_streamprof"] = version("lightning-streamprof")
    except Exception:  # noqa: BLE001
        out["lightning_streamprof"] = "?"
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "lightning_streamprof"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        out["git"] = sha + (" + uncommitted changes in lightning_streamprof/" if dirty else "")
    except Exception:  # noqa: BLE001
        pass
    try:
        import numpy  # noqa: PLC0415

        out["numpy"] = numpy.__version__
    except Exception:  # noqa: BLE001
        pass
    return out


# ------------------------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", help=f"default: {os.path.relpath(DEFAULT_TRACES, ROOT)}")
    ap.add_argument("--tbp-python", default=DEFAULT_TBP_PYTHON, help="python of the torch-tb-profiler venv")
    ap.add_argument("--ours", default="default",
                    help="'default' or module:function(path)->dict, to test the harness with a stub")
    ap.add_argument("--out-dir", default=str(results_dir(__file__)))
    ap.add_argument("--tag", default="", help="appended to the result file names")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for the reference run")
    ap.add_argument("--no-fail", action="store_true", help="exit 0 whatever the result")
    args = ap.parse_args(argv)

    traces = [os.path.abspath(p) for p in (args.traces or sorted(glob.glob(DEFAULT_TRACES)))]
    if not traces:
        ap.error("no traces")
    absent = [p for p in LIGHTNING_TRACES if not os.path.exists(p)] if not args.traces else []
    for path in absent:
        print(f"skipped (not captured yet): {os.path.relpath(path, ROOT)}", file=sys.stderr)
    now = datetime.datetime.now(datetime.timezone.utc)
    command = " ".join([invocation(__file__), shlex.join(argv or sys.argv[1:])]).rstrip()

    tbp_versions, records, ref_error = run_reference(args.tbp_python, traces, args.timeout)

    ours_fn, ours_error = None, None
    try:
        ours_fn = load_ours(args.ours)
    except Exception:  # noqa: BLE001 - e.g. analyze_table not written yet
        ours_error = traceback.format_exc()

    results, all_ok, any_unchecked = [], True, ref_error is not None or ours_fn is None
    for path in traces:
        ref = records.get(path, {"trace": path, "modes": {}})
        ours, t_err = None, None
        if ours_fn is not None:
            try:
                ours = run_ours(ours_fn, path)
            except Exception:  # noqa: BLE001
                t_err = traceback.format_exc()
                any_unchecked = True
        cmp = compare(ref, ours)
        if TARGET_MODE not in ref.get("modes", {}) or "error" in ref["modes"][TARGET_MODE]:
            any_unchecked = True
        if cmp["failures"]:
            all_ok = False
        results.append({"trace": path, "trace_info": trace_info(path), "reference": ref, "ours": ours,
                        "ours_error": t_err, **cmp})

    verdict = False if not all_ok else (None if any_unchecked else True)
    report = {
        "benchmark": "compare_tb_profiler",
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": command,
        "versions": {"ours": our_versions(), "tbp": tbp_versions},
        "targets": {"reference_mode": TARGET_MODE, "gpu_metrics_abs_tolerance": GPU_TOL,
                    "step_time_share_tolerance": STEP_TOL, "step_count": "equal"},
        "skipped_absent": [os.path.relpath(p, ROOT) for p in absent],
        "reference_error": ref_error,
        "ours_error": ours_error,
        "pass": verdict,
        "traces": results,
    }
    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, f"compare_tb_profiler-{now:%Y%m%d}{args.tag}")
    report = json.loads(json.dumps(report).replace(ROOT + os.sep, ""))  # repository-relative paths
    with open(stem + ".json", "w") as fh:
        json.dump(report, fh, indent=1)
    md = markdown(report)
    with open(stem + ".md", "w") as fh:
        fh.write(md + "\n")
    print(md)
    print(f"\nwrote {stem}.json and {stem}.md", file=sys.stderr)

    if args.no_fail:
        return 0
    if verdict is False:
        return 1
    return 0 if verdict else 2


if __name__ == "__main__":
    sys.exit(main())
