"""Combine the JSON results of several traces (ranks or profiling windows) into one."""

from __future__ import annotations

from typing import Any

from lightning_streamprof.analysis.steps import CATEGORIES

_KERNEL_MEANS = ("blocks_per_sm", "occupancy")
_OPERATOR_SUMS = ("calls", "host_total_ns", "host_self_ns", "device_self_ns", "device_total_ns")


def _trace_label(result: dict[str, Any], index: int) -> dict[str, Any]:
    trace = result.get("trace") or {}
    return {"trace": trace.get("path", index), "rank": trace.get("rank")}


def _steps(results: list[dict[str, Any]]) -> dict[str, Any]:
    count = sum(r["steps"]["count"] for r in results)
    if count == 0:
        return {"count": 0, "mean_ms": 0.0, "breakdown_ms": {c: 0.0 for c in CATEGORIES}}

    def weighted(get) -> float:
        return sum(get(r["steps"]) * r["steps"]["count"] for r in results) / count

    return {
        "count": count,
        "mean_ms": weighted(lambda s: s["mean_ms"]),
        "breakdown_ms": {c: weighted(lambda s, c=c: s["breakdown_ms"][c]) for c in CATEGORIES},
    }


def _kernels(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for r in results:
        for k in r.get("kernels", []):
            m = merged.get(k["name"])
            if m is None:
                merged[k["name"]] = {**k, **{f: (k[f] or 0.0) * k["total_ns"] if k[f] is not None else None
                                              for f in _KERNEL_MEANS}}
                continue
            m["calls"] += k["calls"]
            m["total_ns"] += k["total_ns"]
            m["max_ns"] = max(m["max_ns"], k["max_ns"])
            m["min_ns"] = min(m["min_ns"], k["min_ns"])
            for f in _KERNEL_MEANS:
                if k[f] is not None:
                    m[f] = (m[f] or 0.0) + k[f] * k["total_ns"]
    out = []
    for m in merged.values():
        m["mean_ns"] = m["total_ns"] / m["calls"] if m["calls"] else 0.0
        for f in _KERNEL_MEANS:
            if m[f] is not None:
                m[f] = m[f] / m["total_ns"] if m["total_ns"] else 0.0
        out.append(m)
    return sorted(out, key=lambda k: (-k["total_ns"], k["name"]))


def _operators(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: dict[tuple[str, Any], dict[str, Any]] = {}
    for r in results:
        for op in r.get("operators", []):
            key = (op["name"], op.get("input_shapes"))
            if key not in merged:
                merged[key] = dict(op)
            else:
                for f in _OPERATOR_SUMS:
                    merged[key][f] += op.get(f, 0)
    return sorted(merged.values(), key=lambda o: (-(o["host_self_ns"] + o["device_self_ns"]), o["name"]))


def merge_results(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result for several traces: per-trace results under ``"traces"``; steps weighted by step count,
    kernels and operators summed by name, GPU metrics, memory devices and recommendations listed per trace."""
    labels = [_trace_label(r, i) for i, r in enumerate(results)]
    return {
        "traces": results,
        "gpu": [{**g, **label} for r, label in zip(results, labels) for g in r.get("gpu", [])],
        "steps": _steps(results),
        "kernels": _kernels(results),
        "operators": _operators(results),
        "memory": {
            "devices": [{**d, **label} for r, label in zip(results, labels) for d in r["memory"]["devices"]],
            "operators": [{**o, **label} for r, label in zip(results, labels) for o in r["memory"]["operators"]],
        },
        "recommendations": [
            {**rec, "evidence": {**rec["evidence"], **label}}
            for r, label in zip(results, labels)
            for rec in r.get("recommendations", [])
        ],
    }
