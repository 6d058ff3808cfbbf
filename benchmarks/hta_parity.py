"""Our HTA-style analyses against Holistic Trace Analysis itself, on the same traces: every number both compute.

    python -m benchmarks hta-parity TRACE [TRACE...] --hta-python /tmp/hta-venv/bin/python [--tag TAG] [--out DIR]

HTA (``holistictraceanalysis``, not a dependency of ours: a separate virtualenv with ``pip install --no-deps
holistictraceanalysis`` and pandas, numpy, networkx, plotly, pydot, psutil, ijson, pyyaml) runs on each trace through
``_hta_oracle.py``; ours run on :func:`lightning_streamprof.analysis.hta_compat.hta_view` of the same trace (the
events HTA keeps, rounded as HTA rounds them), so a difference is one of definition. Where a definition differs on
purpose, ours is also restricted to HTA's (e.g. HTA's four launch call names). Writes
``hta_parity-<tag>.md`` and ``.json`` to ``--out`` (default ``benchmarks/results/hta-parity``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _record import code_version, invocation, machine, machine_line, results_dir  # noqa: E402

from lightning_streamprof.analysis.user_ranges import annotation_times  # noqa: E402
from lightning_streamprof.analysis.bandwidth import bandwidth  # noqa: E402
from lightning_streamprof.analysis.context import TraceContext  # noqa: E402
from lightning_streamprof.analysis.critical_path import critical_path  # noqa: E402
from lightning_streamprof.analysis.hta_compat import hta_view, without_last_step  # noqa: E402
from lightning_streamprof.analysis.idle import idle_time  # noqa: E402
from lightning_streamprof.analysis.launches import launch_stats  # noqa: E402
from lightning_streamprof.analysis.queue import queue_lengths  # noqa: E402
from lightning_streamprof.analysis.sequences import kernel_sequences  # noqa: E402
from lightning_streamprof.trace import read_trace  # noqa: E402

#: the launch calls HTA's ``get_cuda_kernel_launch_stats`` pairs
HTA_LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
US = 1000.0


def _row(rows: list, trace: str, analysis: str, quantity: str, hta, ours, note: str = "") -> None:
    rows.append({"trace": trace, "analysis": analysis, "quantity": quantity, "hta": hta, "ours": ours, "note": note})


def _diff(row: dict) -> str:
    """The relative difference of a row in %; of a share (0..1), the difference in percentage points (``pt``)."""
    hta, ours = row["hta"], row["ours"]
    if isinstance(hta, str) or isinstance(ours, str) or hta is None or ours is None:
        return "" if hta == ours else "n/a"
    if hta == ours:
        return "0"
    if "share" in row["quantity"]:
        return f"{abs(ours - hta) * 100:.2f} pt"
    return f"{abs(ours - hta) / max(abs(hta), 1e-12) * 100:.2f}%"


#: Kineto's ``cuda_sync`` events, which HTA's patterns include and our device work does not
CUDA_SYNC_NAMES = frozenset({"Stream Wait Event", "Event Sync", "Context Sync", "Stream Sync"})


def _device_only(patterns: list[dict]) -> list[dict]:
    """HTA's patterns without ``cuda_sync`` events, identical ones merged, most frequent first."""
    merged: dict[str, dict] = {}
    for p in patterns:
        key = "|".join(n for n in p["pattern"].split("|") if n not in CUDA_SYNC_NAMES)
        entry = merged.setdefault(key, {"pattern": key, "count": 0, "gpu_us": 0.0})
        entry["count"] += p["count"]
        entry["gpu_us"] += p["gpu_us"]
    return sorted(merged.values(), key=lambda p: (-p["count"], p["pattern"]))


def trace_names(paths: list[str]) -> dict[str, str]:
    """Each trace's file name, with its folder where two traces share a file name."""
    base = [os.path.basename(p) for p in paths]
    return {p: os.path.join(os.path.basename(os.path.dirname(p)), b) if base.count(b) > 1 else b
            for p, b in zip(paths, base)}


def compare(path: str, hta_python: str, name: str | None = None) -> list[dict]:
    name = name or os.path.basename(path)
    table = read_trace(path)
    # negative durations as HTA keeps them for the per-event arithmetic (idle, launches, queue); 0 at least where
    # ranges nest (annotations, critical path, sequences)
    ctx = TraceContext(hta_view(table, negative=True))
    nested = TraceContext(hta_view(table))
    # copies' bandwidth from their recorded durations (HTA reads Kineto's own bandwidth argument)
    unrounded = TraceContext(without_last_step(table))
    seq_ours = kernel_sequences(nested)
    operator = seq_ours.sequences[0].operator if seq_ours.sequences else None
    cmd = [hta_python, str(Path(__file__).with_name("_hta_oracle.py")), path] + (["--operator", operator] if operator
                                                                                else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    rows: list[dict] = []
    if proc.returncode:
        _row(rows, name, "hta", "run", f"failed: {proc.stderr.strip().splitlines()[-1:]}", None)
        return rows
    hta = json.loads(proc.stdout.strip().splitlines()[-1])

    def failed(key: str) -> bool:
        value = hta.get(key)
        if isinstance(value, dict) and "error" in value:
            _row(rows, name, key, "HTA raised", value["error"], None)
            return True
        return False

    if not failed("idle"):
        ours = idle_time(ctx).streams
        for cat in ("host_wait", "kernel_wait", "other"):
            h = sum(r["us"] for r in hta["idle"] if r["category"] == cat)
            _row(rows, name, "idle", f"{cat} (µs, all streams)", round(h, 3),
                 round(sum(getattr(s, f"{cat}_ns") for s in ours) / US, 3))
        by_stream = {s.stream: s for s in ours}
        for stream in sorted({int(r["stream"]) for r in hta["idle"]}):
            mine = by_stream.get(stream)
            for cat in ("host_wait", "kernel_wait", "other"):
                h = sum(r["us"] for r in hta["idle"] if r["category"] == cat and int(r["stream"]) == stream)
                _row(rows, name, "idle", f"stream {stream} {cat} (µs)", round(h, 3),
                     round(getattr(mine, f"{cat}_ns") / US, 3) if mine else None)
    if not failed("launches"):
        ls = [x for x in launch_stats(ctx).launches if x.name in HTA_LAUNCH_NAMES]
        for key, ours_v in (("launches", sum(x.launches for x in ls)), ("cpu_us", sum(x.cpu_ns for x in ls) / US),
                            ("gpu_us", sum(x.gpu_ns for x in ls) / US), ("delay_us", sum(x.delay_ns for x in ls) / US),
                            ("short", sum(x.short for x in ls)),
                            ("runtime_outliers", sum(x.runtime_outliers for x in ls)),
                            ("delay_outliers", sum(x.delay_outliers for x in ls))):
            _row(rows, name, "launches", key, hta["launches"][key], round(ours_v, 3), "HTA's four call names")
    if not failed("aten"):
        ops = launch_stats(ctx, limit=10**6).operators
        h = hta["aten"]
        _row(rows, name, "aten_op_delay", "instances", sum(r["count"] for r in h), sum(o.count for o in ops))
        _row(rows, name, "aten_op_delay", "(operator, sequence) groups", len(h), len(ops))
        _row(rows, name, "aten_op_delay", "Σ launch delay (µs)",
             round(sum(r["count"] * r["launch_delay_us"] for r in h), 1),
             round(sum(o.launch_delay_ns for o in ops) / US, 1), "HTA's means are rounded to 3 decimals")
        _row(rows, name, "aten_op_delay", "Σ runtime delay (µs)",
             round(sum(r["count"] * r["runtime_delay_us"] for r in h), 1),
             round(sum(o.runtime_delay_ns for o in ops) / US, 1))
    ann = annotation_times(nested)
    by_name = {r.name: r for r in ann.rows}
    if not failed("spans"):
        for n, h in sorted(hta["spans"].items()):
            if not n.startswith("ProfilerStep"):
                r = by_name.get(n)
                _row(rows, name, "annotation_gpu_span", f"{n[:70]} (µs)", h, r.gpu_span_ns / US if r else 0.0)
    if not failed("overlap"):
        for n, h in sorted(hta["overlap"].items()):
            if not n.startswith("ProfilerStep"):
                r = by_name.get(n)
                _row(rows, name, "annotation_kernels", f"{n[:70]} (µs)", h, r.gpu_overlap_device_ns / US if r else 0.0)
    if not failed("queue"):
        ours_q = {s.stream: s for s in queue_lengths(ctx).streams}
        for stream, h in sorted(hta["queue"]["streams"].items()):
            q = ours_q.get(int(stream))
            for key, value in (("count", q.points if q else None), ("mean", round(q.point_mean, 4) if q else None),
                               ("max", q.max_length if q else None), ("min", q.min_length if q else None)):
                _row(rows, name, "queue_length", f"stream {stream} {key}", round(h[key], 4), value,
                     "HTA leaves out graph kernels and some launch names")
        blocked = sum(b.get("duration_at_max_queue_length", 0) for b in hta["queue"]["blocked"])
        _row(rows, name, "queue_length", "blocked at 1,024 (µs)", blocked,
             sum(s.blocked_ns for s in ours_q.values()) / US)
    if not failed("bandwidth"):
        series = {s.kind: s for s in bandwidth(unrounded).series}
        for kind, h in sorted(hta["bandwidth"].items()):
            s = series.get(kind)
            for key, value in (("count", s.points if s else None), ("mean GB/s", round(s.mean_gbps, 4) if s else None),
                               ("max GB/s", round(s.peak_gbps, 4) if s else None)):
                _row(rows, name, "bandwidth", f"{kind} {key}", round(h[key.split()[0]], 4), value,
                     "" if key == "count" else "HTA: Kineto's bandwidth at its ns durations; ours: bytes / duration")
    if not failed("critical"):
        cp = critical_path(nested)
        h = hta["critical"]["bound_by_us"]
        total = sum(h.values()) or 1.0
        mine = cp.steps[0].breakdown_ns if cp.steps else {}
        span = (cp.steps[0].span_ns if cp.steps else 0) or 1
        mapping = {"cpu_bound": ("cpu",), "gpu_compute_bound": ("gpu_compute", "gpu_copy"),
                   "gpu_communication_bound": ("gpu_communication",), "gpu_kernel_kernel_overhead": ("kernel_gap",),
                   "gpu_kernel_launch_overhead": ("launch_delay",)}
        for cls, cats in mapping.items():
            _row(rows, name, "critical_path", f"{cls} share of the path", round(h.get(cls, 0.0) / total, 4),
                 round(sum(mine.get(c, 0) for c in cats) / span, 4), "definitions differ (module docstring)")
    if operator and not failed("sequences"):
        ours_s = kernel_sequences(nested, operator, limit=10**6).sequences
        h = _device_only(hta["sequences"])
        _row(rows, name, "kernel_sequences", f"patterns under {operator[:50]}", len(h), len(ours_s))
        _row(rows, name, "kernel_sequences", "instances", sum(r["count"] for r in h), sum(s.count for s in ours_s),
             "HTA: shallowest depth only; its cuda_sync events left out of its patterns")
        if h and ours_s:
            _row(rows, name, "kernel_sequences", "top pattern count", h[0]["count"], ours_s[0].count)
    return rows


def _hta_version(python: str) -> str:
    """HolisticTraceAnalysis's version and pandas' and numpy's in the interpreter that runs it."""
    code = ("import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in "
            "('holistictraceanalysis', 'pandas', 'numpy')))")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    return proc.stdout.strip() or "holistictraceanalysis (version unknown)"


def _pct(diff: str) -> float | None:
    """A difference as a number (0 for equal), None where it cannot be one (a failed analysis, a missing value)."""
    if diff in ("0", ""):
        return 0.0
    if diff.endswith(" pt"):
        return float(diff[:-3])
    return float(diff[:-1]) if diff.endswith("%") else None


def summary_lines(rows: list[dict]) -> list[str]:
    """Analysis × trace: how many numbers each compares, how many are equal, within 1% (a share: 1 percentage
    point), and the largest difference (``n/a``: HTA failed or one side has no value)."""
    groups: dict[tuple[str, str], list[float | None]] = {}
    units: dict[tuple[str, str], str] = {}
    for r in rows:
        key = (r["analysis"], r["trace"])
        groups.setdefault(key, []).append(_pct(_diff(r)))
        units[key] = " pt" if "share" in r["quantity"] else "%"
    out = ["| analysis | trace | numbers | equal | within 1% | largest difference |", "|---|---|---:|---:|---:|---:|"]
    for (analysis, trace), diffs in sorted(groups.items()):
        known = [d for d in diffs if d is not None]
        largest = f"{max(known):.2f}{units[(analysis, trace)]}" if known else "n/a"
        if len(known) < len(diffs):
            largest += f" ({len(diffs) - len(known)} n/a)"
        out.append(f"| {analysis} | {trace} | {len(diffs)} | {sum(d == 0 for d in known)} | "
                   f"{sum(0 < d <= 1 for d in known)} | {largest} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--hta-python", required=True)
    parser.add_argument("--tag", default="")
    parser.add_argument("--out", default=str(results_dir(__file__)))
    args = parser.parse_args()
    rows: list[dict] = []
    labels = trace_names(args.traces)
    for path in args.traces:
        start = time.perf_counter()
        rows += compare(path, args.hta_python, labels[path])
        print(f"{os.path.basename(path)}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    stamp = time.strftime("%Y%m%d")
    base = Path(args.out) / f"hta_parity-{stamp}{args.tag}"
    command = invocation(__file__) + " " + " ".join(os.path.relpath(t, ROOT) if t.startswith(str(ROOT)) else t
                                                            for t in args.traces) + " --hta-python <HTA venv python>"
    meta = {"machine": machine_line(machine()), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command,
            "code": code_version(), "hta": _hta_version(args.hta_python)}
    base.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    exact = sum(1 for r in rows if _diff(r) in ("0", ""))
    within = sum(1 for r in rows if (_pct(_diff(r)) or 0) > 0 and _pct(_diff(r)) <= 1.0)
    lines = [f"# hta_parity ({meta['date']})", "", f"- machine: {meta['machine']}", f"- command: `{command}`",
             f"- code measured: {meta['code']}; {meta['hta']}",
             "- ours on `hta_view(trace)` (the events HTA keeps, rounded as HTA rounds them); HTA's units (µs, GB/s)",
             f"- {len(rows)} comparisons: {exact} equal, {within} more within 1%, "
             f"{len(rows) - exact - within} further apart or failing (see notes)", ""]
    lines += summary_lines(rows)
    lines += ["", "| trace | analysis | quantity | HTA | ours | difference | note |", "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['trace']} | {r['analysis']} | {r['quantity']} | {r['hta']} | {r['ours']} | "
                     f"{_diff(r)} | {r['note']} |")
    base.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
