import gzip
import json
import os
import re
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

#: torch-tb-profiler's file pattern (worker name, optional span number)
TB_PATTERN = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(\.gz)?$")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
