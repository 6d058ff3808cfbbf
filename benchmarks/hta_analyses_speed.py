"""How long each of the HTA-style analyses takes on a trace, beside reading it and the existing analysis pass.

    python -m benchmarks hta-analyses-speed TRACE [TRACE...] [--repeat R] [--out FILE.md]

Per trace: the read, ``analyze_table`` (every existing analysis, its shared indices built on the way), then each new
analysis on the same (warm) context: idle time, launch statistics, annotation times, queue length, bandwidth,
critical path, kernel sequences (median of ``--repeat`` runs, seconds); and the new analyses on a cold context
(indices built by them alone).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightning_streamprof.analysis import analyze_table  # noqa: E402
from lightning_streamprof.analysis.user_ranges import annotation_times  # noqa: E402
from lightning_streamprof.analysis.bandwidth import bandwidth  # noqa: E402
from lightning_streamprof.analysis.context import TraceContext  # noqa: E402
from lightning_streamprof.analysis.critical_path import critical_path  # noqa: E402
from lightning_streamprof.analysis.idle import idle_time  # noqa: E402
from lightning_streamprof.analysis.launches import launch_stats  # noqa: E402
from lightning_streamprof.analysis.queue import queue_lengths  # noqa: E402
from lightning_streamprof.analysis.sequences import kernel_sequences  # noqa: E402
from lightning_streamprof.trace import read_trace  # noqa: E402
from _record import code_version, invocation  # noqa: E402

ANALYSES = {"idle_time": idle_time, "launch_stats": launch_stats, "annotation_times": annotation_times,
            "queue_lengths": queue_lengths, "bandwidth": bandwidth, "critical_path": critical_path,
            "kernel_sequences": kernel_sequences}


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def measure(path: str, repeat: int) -> dict[str, float]:
    start = time.perf_counter()
    table = read_trace(path)
    out = {"events": float(len(table)), "read": time.perf_counter() - start}
    ctx = TraceContext(table)
    out["analyze_table"] = statistics.median(_timed(analyze_table, table) for _ in range(repeat))
    # the existing pass on this context, so the shared indices are warm as in the worker
    warm = TraceContext(table)
    from lightning_streamprof.analysis.steps import step_breakdown

    step_breakdown(warm)
    _ = warm.op_nesting, warm.device_launch, warm.kernel_owner
    for name, fn in ANALYSES.items():
        out[name] = statistics.median(_timed(fn, warm) for _ in range(repeat))
    cold = time.perf_counter()
    for fn in ANALYSES.values():
        fn(ctx)
    out["all_new_cold"] = time.perf_counter() - cold
    out["all_new_warm"] = sum(out[n] for n in ANALYSES)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    cols = ["events", "read", "analyze_table", *ANALYSES, "all_new_warm", "all_new_cold"]
    lines = [f"# hta_analyses_speed — {platform.machine()} {os.cpu_count()} CPU cores, {time.strftime('%Y%m%d')}", "",
             f"`{invocation(__file__)} {' '.join(os.path.basename(t) for t in args.traces)} "
             f"--repeat {args.repeat}` (seconds; median of {args.repeat}), code {code_version()}", "",
             "| trace | " + " | ".join(cols) + " |", "| --- " * (len(cols) + 1) + "|"]
    for path in args.traces:
        m = measure(path, args.repeat)
        lines.append(f"| {os.path.basename(path)} | {int(m['events'])} | "
                     + " | ".join(f"{m[c]:.3f}" for c in cols[1:]) + " |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
