"""torch-tb-profiler 0.4.3 reference numbers for Kineto traces (runs INSIDE the torch-tb-profiler venv).

    .venv-tbp/bin/python benchmarks/tbp_reference.py TRACE [TRACE ...] [--modes released,corrected,corrected_ab]

Prints one JSON object per trace (one line each) on stdout; torch-tb-profiler's own log goes to stderr.
Only the standard library and ``torch_tb_profiler`` are imported, so this file must not import
``lightning_streamprof`` (that package is not installed in this venv).

Every trace is loaded with torch-tb-profiler's own parsing, ``RunProfileData.parse(worker, span, path,
cache_dir)`` (which runs ``.process()`` and ``.analyze()``), once per mode:

``released``
    torch-tb-profiler 0.4.3 exactly as published.
``corrected_ab``
    the two misreadings of traces from recent torch named in the brief, corrected:
    (a) ``trace.EventTypeMap['cuda_runtime'] = trace.EventTypeMap['cuda_driver'] = EventTypes.RUNTIME``
        (0.4.3 only knows the torch-1.x category ``runtime``; without this the launches are dropped, Runtime
        is 0, kernels are not linked to operators and step ends are not extended to the device);
    (b) ``trace.create_event`` wrapped to return ``None`` for ``cat == 'gpu_user_annotation'`` events whose
        name starts with ``ProfilerStep#`` (0.4.3 maps ``gpu_user_annotation`` to USER_ANNOTATION and then
        makes every ``ProfilerStep#N`` of that type a ProfilerStepEvent, so each step is counted twice).
``corrected``
    (a) + (b) + (c): (c) the same ``trace.create_event`` wrapper returns
    ``OperatorEvent(EventTypes.USER_ANNOTATION, event)`` for every ``cat == 'user_annotation'`` event but
    ``ProfilerStep#N`` (which stays a step), as torch-tb-profiler's own later code does (``trace.py`` after 0.4.3
    maps every ``user_annotation`` to an operator event). 0.4.3's ``create_trace_event`` returns ``None`` for every
    ``user_annotation`` that is neither a ProfilerStep nor a gloo/nccl collective, while recent torch records
    ``record_function`` ranges -- the DataLoader's ``enumerate(DataLoader)#...__next__``, ``Optimizer.step``,
    Lightning's ``[pl][profile]`` actions -- as ``user_annotation``; so DataLoader is 0 and the time inside those
    ranges falls to Other even with (a) and (b). 0.4.3 itself expects these events to arrive:
    ``StepParser._parse_step`` tests ``evt_type == EventTypes.USER_ANNOTATION`` for the DataLoader and CPU Exec
    roles and ``node.create_operator_node`` turns a DataLoader range into a ``DataLoaderNode`` -- all unreachable
    without (c). This is the mode the comparison's targets use.
``corrected_dataloader``
    (a) + (b) and only the DataLoader ``user_annotation`` events kept (the previous ``corrected``): the Lightning
    ranges are then Other, for comparison.

Nothing else is changed: the patches only decide which ``BaseEvent`` objects exist; all timing logic is
0.4.3's. Two read-only wrappers record the step spans (``OverallParser.aggregate``'s ``steps`` argument)
and the GPU-metrics span (``GPUMetricsParser.parse_events`` arguments) so they can be reported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import sys
import tempfile
import traceback

MODES = ("released", "corrected_ab", "corrected_dataloader", "corrected")
#: torch-tb-profiler ProfileRole index -> our breakdown key
ROLE_KEYS = (
    ("Kernel", "kernel"),
    ("Memcpy", "memcpy"),
    ("Memset", "memset"),
    ("Communication", "communication"),
    ("Runtime", "runtime"),
    ("DataLoader", "dataloader"),
    ("CpuOp", "cpu_exec"),
    ("Other", "other"),
)


def _is_dataloader_name(name) -> bool:
    # the same test as 0.4.3's StepParser._parse_step / node.create_operator_node
    return bool(name) and (
        (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__"))
        or name.startswith("enumerate(DataPipe)#")
    )


@contextlib.contextmanager
def patched(mode: str):
    """Apply the monkeypatches of ``mode`` to torch_tb_profiler's modules; undo them on exit."""
    from torch_tb_profiler.profiler import trace
    from torch_tb_profiler.profiler.trace import EventTypes, OperatorEvent

    if mode == "released":
        yield
        return
    keep_annotations = mode == "corrected"
    fix_dataloader = mode in ("corrected", "corrected_dataloader")
    saved_map = dict(trace.EventTypeMap)
    original_create_event = trace.create_event

    def create_event(event, is_pytorch_lightning):
        cat = event.get("cat")
        name = event.get("name")
        if event.get("ph") == "X" and isinstance(name, str):
            if cat == "gpu_user_annotation" and name.startswith("ProfilerStep#"):  # (b)
                return None
            if cat == "user_annotation" and not name.startswith("ProfilerStep#") and (
                    keep_annotations or (fix_dataloader and _is_dataloader_name(name))):  # (c)
                return OperatorEvent(EventTypes.USER_ANNOTATION, event)
        return original_create_event(event, is_pytorch_lightning)

    trace.EventTypeMap["cuda_runtime"] = EventTypes.RUNTIME  # (a)
    trace.EventTypeMap["cuda_driver"] = EventTypes.RUNTIME  # (a)
    trace.create_event = create_event  # data.py calls trace.create_event through the module
    try:
        yield
    finally:
        trace.create_event = original_create_event
        trace.EventTypeMap.clear()
        trace.EventTypeMap.update(saved_map)


@contextlib.contextmanager
def recorder(sink: dict):
    """Read-only wrappers that record the step spans and the GPU-metrics span."""
    from torch_tb_profiler.profiler import data as data_mod
    from torch_tb_profiler.profiler.overall_parser import OverallParser

    original_aggregate = OverallParser.aggregate
    original_parse_events = data_mod.GPUMetricsParser.parse_events

    def aggregate(self, steps, role_ranges):
        sink["steps"] = [list(s) for s in steps]
        return original_aggregate(self, steps, role_ranges)

    def parse_events(events, global_start_time, global_end_time, steps_start_time, steps_end_time):
        sink["metrics_span_us"] = [steps_start_time, steps_end_time]
        return original_parse_events(events, global_start_time, global_end_time, steps_start_time, steps_end_time)

    OverallParser.aggregate = aggregate
    data_mod.GPUMetricsParser.parse_events = staticmethod(parse_events)
    try:
        yield
    finally:
        OverallParser.aggregate = original_aggregate
        data_mod.GPUMetricsParser.parse_events = original_parse_events


def _ms(us) -> float:
    return float(us) / 1000.0


def run_mode(path: str, mode: str, cache_dir: str) -> dict:
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.event_parser import ProfileRole

    sink: dict = {}
    with patched(mode), recorder(sink):
        profile = RunProfileData.parse("worker0", "1", path, cache_dir)

    gm = profile.gpu_metrics_parser
    gpu = []
    for dev in sorted(gm.gpu_ids):
        sm = gm.avg_approximated_sm_efficiency_per_device[dev]
        occ = gm.avg_occupancy_per_device[dev]
        gpu.append({
            "device": int(dev),
            "utilization": gm.gpu_utilization[dev],
            "sm_efficiency": sm,
            "achieved_occupancy": None if occ is None else occ / 100.0,  # 0.4.3 keeps it in percent
        })

    def breakdown(costs) -> dict:
        return {key: _ms(costs.costs[getattr(ProfileRole, role)]) for role, key in ROLE_KEYS}

    per_step = []
    for i, costs in enumerate(profile.steps_costs):
        span = sink.get("steps", [None] * (i + 1))[i]
        per_step.append({
            "name": profile.steps_names[i],
            "start_us": span[0] if span else None,
            "end_us": span[1] if span else None,
            "total_ms": _ms(costs.costs[ProfileRole.Total]),
            "breakdown_ms": breakdown(costs),
        })
    return {
        "gpu": gpu,
        "steps": {
            "count": len(profile.steps_costs),
            "names": list(profile.steps_names),
            "mean_ms": _ms(profile.avg_costs.costs[ProfileRole.Total]),
            "breakdown_ms": breakdown(profile.avg_costs),
            "per_step": per_step,
        },
        "metrics_span_us": sink.get("metrics_span_us"),
        "has_runtime": bool(profile.has_runtime),
        "has_kernel": bool(profile.has_kernel),
        "has_communication": bool(profile.has_communication),
        "recommendations": list(profile.recommendations),
    }


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("torch_tb_profiler", "tensorboard", "pandas", "numpy"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - report, don't fail
            out[mod] = f"unavailable: {exc}"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
    ap.add_argument("--versions", action="store_true", help="print a versions line first")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown modes {bad}")
    logging.basicConfig(stream=sys.stderr, level=args.log_level)
    os.environ.setdefault("TORCH_PROFILER_LOG_LEVEL", args.log_level)
    try:
        from torch_tb_profiler import utils as tbp_utils

        tbp_utils.get_logger().setLevel(args.log_level)
    except Exception:  # noqa: BLE001
        pass

    status = 0
    if args.versions:
        print(json.dumps({"versions": versions()}), flush=True)
    with tempfile.TemporaryDirectory(prefix="tbp-cache-") as cache_dir:
        for path in args.traces:
            record = {"trace": os.path.abspath(path), "modes": {}}
            for mode in modes:
                try:
                    record["modes"][mode] = run_mode(path, mode, cache_dir)
                except Exception as exc:  # noqa: BLE001 - one failing trace must not hide the others
                    status = 1
                    record["modes"][mode] = {"error": f"{type(exc).__name__}: {exc}",
                                             "traceback": traceback.format_exc()}
            print(json.dumps(record), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
