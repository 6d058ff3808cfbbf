"""What every benchmark result records: the machine, the date, the command and the measured code (no torch)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

from suites import results_dir, suite_of  # noqa: F401 - results_dir: each script's default --out

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict:
    """CPU model, cores, memory, Python and platform of this machine."""
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "memory_gib": round(mem_gib, 1),
            "python": platform.python_version(), "platform": platform.platform()}


def machine_line(m: dict) -> str:
    return f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Python {m['python']}, {m['platform']}"


def code_version() -> str:
    """The measured checkout's git commit (with a note when it has changes); ``STREAMPROF_CODE`` names it where the
    checkout's git history is not the one measured (a copy of the working tree on another machine)."""
    if os.environ.get("STREAMPROF_CODE"):
        return os.environ["STREAMPROF_CODE"]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "lightning_streamprof"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + (" + uncommitted changes" if dirty else "")
    except OSError:
        return "?"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def command_args() -> str:
    """The command line's arguments without ``--out DIR`` (a machine path)."""
    args, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            args.append(a)
    return " ".join(args)


def invocation(script: str) -> str:
    """``python -m benchmarks <suite>`` of the script ``script`` (a name or a path); ``python benchmarks/<script>``
    for a script of no suite."""
    suite = suite_of(script)
    return f"python -m benchmarks {suite.name}" if suite else f"python benchmarks/{os.path.basename(script)}"


def command(script: str) -> str:
    """:func:`invocation` of ``script`` with this run's arguments, without ``--out DIR``."""
    return f"{invocation(script)} {command_args()}".rstrip()
