"""A long run in short: windows every 10 steps keep the training process's memory flat, exports keep up with
training, and the end-of-stage summary stays short (the full 20,000-step run: benchmarks/long_run_memory.py)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 2**20


def test_memory_stays_flat_and_exports_keep_up():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "long_run_memory.py"), "--steps", "150",
                          "--every", "10", "--settle", "5", "--print"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = json.loads(out.stdout.strip().splitlines()[-1])["runs"]
    assert run["steps"] == 150 and run["windows_written"] == 13
    growth = run["growth"]
    assert growth["growth_bytes"] < 4 * MIB and growth["max_over_base_bytes"] < 4 * MIB, growth
    assert run["max_export_lag"] <= 1  # at each window start, the previous windows are written
    assert run["analyses_kept"] <= 3 and run["windows_kept"] == 13
    # the last windows only, then the recommendations (a line per kind and one per window shown), the report's path
    # and the next commands
    assert run["summary_lines"] < 75 and run["summary_bytes"] < 10000
