"""Does Holistic Trace Analysis load a window directory of StreamProfiler traces with every rank?

    <python with HolisticTraceAnalysis> -m benchmarks hta-load WINDOW_DIR [--out FILE.md]

Run it with the interpreter of a virtualenv that has ``HolisticTraceAnalysis`` (it is not a dependency of ours).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from _record import code_version, invocation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("window_dir")
    parser.add_argument("--out")
    args = parser.parse_args()
    import hta
    from hta.trace_analysis import TraceAnalysis

    files = sorted(f for f in os.listdir(args.window_dir) if f.endswith((".json", ".gz")))
    analysis = TraceAnalysis(trace_dir=args.window_dir)
    ranks = {r: len(df) for r, df in sorted(analysis.t.traces.items())}
    lines = [f"# hta_load — {platform.machine()} {os.cpu_count()} CPU cores, {time.strftime('%Y%m%d')}", "",
             f"`{invocation(__file__)} <window dir>` (HolisticTraceAnalysis {getattr(hta, '__version__', '?')}), "
             f"code {code_version()}",
             "", f"files: {', '.join(files)}", "", "| rank | events |", "| --- | --- |",
             *(f"| {r} | {n} |" for r, n in ranks.items()), ""]
    try:
        overlap = analysis.get_comm_comp_overlap(visualize=False)
        lines += ["get_comm_comp_overlap:", "", "```", overlap.to_string(), "```", ""]
    except Exception as err:  # noqa: BLE001 - CPU traces have no kernels: HTA's GPU analyses need some
        lines += [f"get_comm_comp_overlap: {type(err).__name__}: {err}", ""]
    text = "\n".join(lines)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
