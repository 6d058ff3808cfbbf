"""The ``Example::`` of StreamProfiler's docstring runs as written and prints a summary of its windows."""

import subprocess
import sys
import textwrap

from lightning_streamprof import StreamProfiler


def test_the_class_docstring_example_runs(tmp_path):
    code = textwrap.dedent(StreamProfiler.__doc__.split("Example::", 1)[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "StreamProfiler: " in out.stdout and " on rank 0" in out.stdout
    assert list((tmp_path / "streamprof").glob("fit-*/report.html"))
