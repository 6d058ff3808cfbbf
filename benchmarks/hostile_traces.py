"""Time `streamprof analyze` on two hostile traces: 100,000 time-nested CPU operators, and 20 million `0` list
entries in a 38 KB gzip. Prints seconds and peak memory of each run (GNU time), and writes them to
``--out``/hostile_traces-<tag>.md.

    python -m benchmarks hostile-traces --tag cpu
"""

import argparse
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile

from _record import code_version, command, results_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def nested(path: str, n: int = 100_000) -> None:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": i, "dur": 2 * (n - i)}
              for i in range(n)]
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
                   "dur": 2 * n + 5})
    with open(path, "wb") as f:
        f.write(gzip.compress(json.dumps({"traceEvents": events}).encode()))


def zeros(path: str, n: int = 20_000_000) -> None:
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": [' + b"0," * n + b"0]}"))


def timed(path: str) -> tuple[float, int, int]:
    out = subprocess.run(["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "lightning_streamprof.cli",
                          "analyze", path], capture_output=True, text=True)
    seconds, kb = out.stderr.strip().splitlines()[-1].split()
    return float(seconds), int(kb) // 1024, out.returncode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", default="cpu")
    parser.add_argument("--out", default=str(results_dir(__file__)))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("100,000 nested operators", nested), ("20 million zeros", zeros)):
            path = os.path.join(tmp, name.split()[1] + ".json.gz")
            make(path)
            seconds, mb, rc = timed(path)
            rows.append(f"| {name} | {os.path.getsize(path):,} | {seconds:.2f} | {mb} | {rc} |")
    text = "\n".join([f"# hostile_traces ({platform.node()}, {os.cpu_count()} cores, {datetime.date.today()})", "",
                      f"`{command(__file__)}`  ", f"code {code_version()}", "",
                      "| trace | bytes | seconds | peak MB | exit |", "| --- | ---: | ---: | ---: | ---: |", *rows, ""])
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"hostile_traces-{args.tag}.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
