"""Reading the traces a test run wrote."""

import gzip
import json
import os
import re

#: torch-tb-profiler's file pattern (worker name, optional span number)
TB_PATTERN = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(\.gz)?$")


def load_trace(path):
    with gzip.open(path, "rb") as f:
        return json.load(f)


def trace_files(root):
    out = []
    for dirpath, _, files in os.walk(root):
        out += [os.path.join(dirpath, f) for f in files if f.endswith(".pt.trace.json.gz")]
    return sorted(out)


def step_numbers(trace):
    return sorted(
        int(e["name"].split("#")[1]) for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")
    )
