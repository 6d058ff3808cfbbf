"""The data flows one way: trace -> analysis -> results -> renderers; analysis never needs torch or Lightning."""

import ast
import os
import subprocess
import sys

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lightning_streamprof")
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "traces", "frozen_backbone.pt.trace.json.gz")


def _imports(folder):
    for name in os.listdir(os.path.join(PACKAGE, folder)):
        if name.endswith(".py"):
            with open(os.path.join(PACKAGE, folder, name)) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    yield name, node.module
                elif isinstance(node, ast.Import):
                    yield from ((name, alias.name) for alias in node.names)


def test_renderers_read_results_only():
    found = [(f, m) for f, m in _imports("report") if m.startswith(("lightning_streamprof.trace", "lightning_streamprof.analysis"))]
    assert found == []


def test_analysing_a_trace_imports_neither_torch_nor_lightning():
    code = (
        "import sys\n"
        "from lightning_streamprof.api import analyze\n"
        f"analyze({FIXTURE!r})\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'pytorch_lightning'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
