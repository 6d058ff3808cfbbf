"""The invariants every result keeps: each step's parts sum to the step, fractions lie in 0..1, times, counts
and sizes are never negative, and every number fits JSON (64-bit integers, finite floats)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import msgspec

from lightning_streamprof.results.schema import Result

_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1
#: fields that are fractions (0..1, or None)
_FRACTIONS = {"utilization", "sm_efficiency", "achieved_occupancy", "occupancy", "tc_share", "eligible_share",
              "share"}
#: integer fields that may be negative (size changes and ids)
_SIGNED = {"increase_bytes", "self_increase_bytes", "step", "device", "device_id", "rank", "window", "first_step",
           "world_size", "compute_major", "start_ns", "end_ns", "host_start_ns", "host_end_ns", "starts_ns"}

#: where -1 stands for "unknown" (the per-rank summaries' sequence numbers, sizes and step numbers)
_UNKNOWN_AS_MINUS_ONE = "result.distributed.summaries"


def _walk(value: Any, where: str) -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk(v, f"{where}[{i}]")
    else:
        yield where, value


def _field(where: str) -> str:
    return where.rsplit(".", 1)[-1].split("[", 1)[0]


def _number_problems(result: Result) -> Iterable[str]:
    for where, value in _walk(msgspec.to_builtins(result), "result"):
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        name = _field(where)
        if isinstance(value, int):
            if not _INT_MIN <= value <= _UINT_MAX:
                yield f"{where} = {value} does not fit in 64 bits"
            elif value < 0 and name not in _SIGNED and not where.startswith("result.recommendations") \
                    and not (value == -1 and where.startswith(_UNKNOWN_AS_MINUS_ONE)):
                yield f"{where} = {value} is negative"
        elif isinstance(value, float):
            if not math.isfinite(value):
                yield f"{where} = {value} is not finite"
            elif name in _FRACTIONS and not 0.0 <= value <= 1.0:
                yield f"{where} = {value} is not a fraction in 0..1"
            elif value < 0 and not where.startswith("result.recommendations"):
                yield f"{where} = {value} is negative"


def _step_problems(result: Result) -> Iterable[str]:
    steps = result.steps
    if steps.count != len(steps.per_step):
        yield f"steps.count {steps.count} != {len(steps.per_step)} steps"
    for i, s in enumerate(steps.per_step):
        if s.end_ns - s.start_ns != s.duration_ns:
            yield f"step {i}: end - start != duration"
        if sum(s.breakdown_ns.values()) != s.duration_ns:
            yield f"step {i}: parts sum to {sum(s.breakdown_ns.values())} ns, not the step's {s.duration_ns} ns"
    total = sum(steps.breakdown_ms.values())
    if not math.isclose(total, steps.mean_ms, rel_tol=1e-9, abs_tol=1e-9):
        yield f"steps: mean parts sum to {total} ms, not the mean step's {steps.mean_ms} ms"


def violations(result: Result) -> list[str]:
    """Every broken invariant of ``result`` (empty when all hold)."""
    return [*_step_problems(result), *_number_problems(result)]
