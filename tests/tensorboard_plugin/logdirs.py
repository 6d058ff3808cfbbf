"""Log directories laid out as StreamProfiler writes them, built in code for the plugin's tests."""

from __future__ import annotations

import gzip
import os

from lightning_streamprof.report.page import page

RUN = "fit-20261203-101500.250-0a1b2c"


def write_report(run_dir: str, title: str = "streamprof report") -> str:
    """A report as the renderer writes one (its page, one section)."""
    path = os.path.join(run_dir, "report.html")
    with open(path, "w") as f:
        f.write(page(f"{title}: {os.path.basename(run_dir)}", "a test",
                     [("overview", "Overview", "<p>step 1.00 ms</p>")]))
    return path


def make_run(logdir, where: str = "version_0/streamprof", name: str = RUN, windows=((0, 3), (1, 11)),
             ranks=(0,), report: bool = True) -> str:
    """A run directory under ``logdir/where`` with a gzipped trace per window and rank; its path."""
    run_dir = os.path.join(str(logdir), *where.split("/"), name)
    for window, first in windows:
        folder = os.path.join(run_dir, f"w{window:03d}-step{first:07d}")
        os.makedirs(folder, exist_ok=True)
        for rank in ranks:
            with gzip.open(os.path.join(folder, f"rank{rank}.17962935{window}{rank}.pt.trace.json.gz"), "wt") as f:
                f.write('{"traceEvents": []}')
    os.makedirs(run_dir, exist_ok=True)
    if report:
        write_report(run_dir)
    return run_dir
