"""The data flows one way: trace -> analysis -> results -> renderers; analysis never needs torch or Lightning;
renderers read results only, and the profiler calls them from one module."""

import ast
import os
import subprocess
import sys

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lightning_streamprof")
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "traces", "frozen_backbone.pt.trace.json.gz")


def _imports(folder):
    """(file, absolute module) of every import in the package's ``folder``, relative imports resolved, including
    the imports inside functions."""
    for name in os.listdir(os.path.join(PACKAGE, folder)):
        if name.endswith(".py"):
            with open(os.path.join(PACKAGE, folder, name)) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = ["lightning_streamprof", folder][: max(0, 3 - node.level)]
                        yield name, ".".join([*base, *([node.module] if node.module else [])])
                    elif node.module:
                        yield name, node.module
                elif isinstance(node, ast.Import):
                    yield from ((name, alias.name) for alias in node.names)


#: package -> the packages it must not import (lower layers never reach up)
FORBIDDEN = {
    "results": ("trace", "analysis", "distributed", "profiling", "pipeline", "report"),
    "trace": ("profiling", "analysis", "distributed", "pipeline", "report"),
    "analysis": ("distributed", "profiling", "pipeline", "report"),
    "report": ("trace", "analysis", "distributed", "profiling", "pipeline"),
    "distributed": ("profiling", "pipeline", "report"),  # the profiler uses the aggregator, not the other way
}


def _reaching_up(folder):
    banned = [f"lightning_streamprof.{p}" for p in FORBIDDEN[folder]]
    return [(f, m) for f, m in _imports(folder) if any(m == b or m.startswith(b + ".") for b in banned)]


def test_the_reader_depends_on_nothing_of_the_recorder():
    assert [(f, m) for f, m in _imports("trace") if m.startswith("lightning_streamprof.profiling")] == []


def test_post_hoc_analysis_does_not_reach_into_the_live_gather():
    assert [(f, m) for f, m in _imports("analysis") if m.startswith("lightning_streamprof.distributed")] == []


def test_the_aggregator_imports_nothing_of_the_profiler():
    """The profiler is the aggregator's user: what both need (``write_atomic``) lives below both, in ``output``."""
    assert [(f, m) for f, m in _imports("distributed") if m.startswith("lightning_streamprof.profiling")] == []


def test_no_package_imports_a_layer_above_it():
    assert {folder: _reaching_up(folder) for folder in FORBIDDEN} == {folder: [] for folder in FORBIDDEN}


def test_renderers_read_results_only():
    found = [(f, m) for f, m in _imports("report") if m.startswith(("lightning_streamprof.trace", "lightning_streamprof.analysis"))]
    assert found == []


#: the one module of the profiler that calls the renderers (the summary, TensorBoard's markdown, the HTML report)
PROFILER_RENDERS_IN = "run_report.py"


def test_the_profiler_renders_through_its_run_report_only():
    found = [(f, m) for f, m in _imports("profiling")
             if m.startswith("lightning_streamprof.report") and f != PROFILER_RENDERS_IN]
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
