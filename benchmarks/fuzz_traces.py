"""The long fuzz run: ``--examples`` generated and mutated traces through the reader, every analysis, merging,
JSON and the terminal renderer (the target: ``tests/fuzz/target.py``; a short run is part of the test suite).

Writes ``fuzz_traces-cpu-<date>.json`` and ``.md`` to ``--out`` (``benchmarks/results/fuzz-traces``): the number of inputs,
how many were rejected with the documented error and how many analysed cleanly, the slowest input, the time,
machine, date and command. Exits 1 with the failing input saved beside the results when a promise breaks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "fuzz")]

from _record import code_version, command, machine, machine_line, now  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from target import run_target, trace_bytes  # noqa: E402
from suites import results_dir  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=results_dir(__file__))
    args = parser.parse_args()
    counts: dict[str, int] = {}
    slowest = [0.0, 0]
    failing: list[bytes] = []

    @settings(max_examples=args.examples, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              print_blob=True)
    @given(trace_bytes())
    def fuzz(data: bytes) -> None:
        start = time.perf_counter()
        try:
            outcome = run_target(data)
        except BaseException:
            failing[:] = [data]
            raise
        took = time.perf_counter() - start
        if took > slowest[0]:
            slowest[:] = [took, len(data)]
        counts[outcome] = counts.get(outcome, 0) + 1

    start = time.perf_counter()
    error = None
    try:
        seed(args.seed)(fuzz)()
    except Exception as err:  # noqa: BLE001 - recorded, then exit 1
        error = f"{type(err).__name__}: {err}"
    seconds = time.perf_counter() - start
    report = {
        "benchmark": "fuzz_traces", "date": now(), "machine": machine(), "command": command("fuzz_traces.py"),
        "code": code_version(), "inputs": sum(counts.values()), "outcomes": counts, "seconds": round(seconds, 1),
        "slowest_input_s": round(slowest[0], 3), "slowest_input_bytes": slowest[1], "failure": error,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"fuzz_traces-cpu-{dt.date.today():%Y%m%d}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    stem.with_suffix(".md").write_text(_markdown(report))
    if failing:
        stem.with_suffix(".failing.bin").write_bytes(failing[0])
    print(_markdown(report))
    return 1 if error else 0


def _markdown(r: dict) -> str:
    outcomes = ", ".join(f"{n:,} {k}" for k, n in sorted(r["outcomes"].items()))
    return "\n".join([
        f"# fuzz_traces ({r['date']})",
        "",
        f"- machine: {machine_line(r['machine'])}",
        f"- command: `{r['command']}`",
        f"- code measured: {r['code']}",
        f"- inputs: {r['inputs']:,} ({outcomes}) in {r['seconds']:,.0f} s; slowest input "
        f"{r['slowest_input_s']:.2f} s ({r['slowest_input_bytes']:,} bytes)",
        f"- broken promises: {r['failure'] or 'none'} (only TraceFormatError raised; invariants held on every clean "
        "result; every result encoded as JSON and rendered without a control character)",
        "",
    ])


if __name__ == "__main__":
    sys.exit(main())
