"""The GPU runner: one call on a GPU machine that has torch and Lightning but no package registry. It installs
this checkout (the small dependencies from the wheels in ``.whl/``), runs the GPU tests, then the chosen suites,
each under its own time-out and all within ``--time-limit``; every result is written under ``--out`` (``$OUT``) as
it comes, and a short table is printed last.

    python -m benchmarks gpu --pipeline "article:8@serial,on,auto@1000@h200-article8@270" ...
    python -m benchmarks gpu --no-tests --run "450 profiler-overhead --steps 2000 --out {out} --tag h200-x"

``--pipeline WORKLOADS@CONFIGS@STEPS@TAG@SECONDS[@EXTRA ARGS]`` is a ``pipeline-speed`` set in ``--rounds`` paired
rounds (or in its own ``--rounds`` among the extra arguments); ``--run "SECONDS SUITE ARGS"`` any suite (``{out}``
in its arguments is ``--out``). ``--gpus 0,1`` runs the sets two at a time, one per GPU.
"""

from __future__ import annotations

import argparse
import glob
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = "/tmp/site"  # where the wheels of .whl/ are installed
SMALL_DEPENDENCIES = ("orjson", "msgspec", "isal")
WHEELS_HINT = ("put their wheels in .whl/ and carry it (pip download --no-deps --only-binary=:all: --python-version "
               "3.12 --platform manylinux2014_x86_64 -d .whl orjson msgspec isal timm kornia kornia_rs diffusers)")
TESTS = ("tests/pipeline/test_gpu.py", "tests/profiling/test_profiler_gpu.py", "tests/transforms",
         "tests/distributed/test_gpu_nccl.py")
QUIET = re.compile(r"Warning|warn|Tip|GPU avail|TPU|HPU|LOCAL_RANK|max_steps|litlogger|Seed set")  # Lightning's
MIN_SECONDS = 30  # a run given less than this is not started


class Stop(Exception):
    """The machine cannot run the suites: one line says why."""


def setup(env: dict) -> None:
    """Install the wheels of ``.whl/`` into :data:`SITE` (on ``PYTHONPATH`` from here on) and this checkout without
    its dependencies; stop when torch, Lightning or a small dependency is missing."""
    wheels = sorted(glob.glob(str(ROOT / ".whl" / "*.whl")))
    if wheels:
        _pip(["install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target",
              SITE, *wheels], env)
    _pip(["install", "-q", "--no-deps", "--no-build-isolation", "-e", str(ROOT)], env)
    probe = "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__, " \
            "torch.cuda.device_count(), 'GPUs')"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    if out.returncode:
        raise Stop("torch or lightning is missing on this machine (the runner installs neither)")
    print(out.stdout.strip(), flush=True)
    check = f"import {', '.join(SMALL_DEPENDENCIES)}"
    if subprocess.run([sys.executable, "-c", check], env=env, capture_output=True).returncode:
        raise Stop(f"{', '.join(SMALL_DEPENDENCIES[:-1])} or {SMALL_DEPENDENCIES[-1]} is missing on this machine: "
                   + WHEELS_HINT)


def _pip(args: list[str], env: dict) -> None:
    out = subprocess.run([sys.executable, "-m", "pip", *args], env=env, capture_output=True, text=True)
    if out.returncode:
        tail = (out.stdout + out.stderr).strip().splitlines()[-1:] or ["?"]
        raise Stop(f"pip {' '.join(args[:2])} failed: {tail[0]}")


def _in_git() -> bool:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode == 0
    except OSError:
        return False


def portable(text: str, out: Path) -> str:
    """``text`` without this machine's paths: its Python as ``python``, installed packages under
    ``site-packages/``, the output folder as ``$OUT``, the checkout's files relative to it."""
    for path, name in ((sys.executable, "python"), (str(out), "$OUT"), (f"{ROOT}/", "")):
        text = text.replace(path, name)
    return re.sub(r"\S*/site-packages/", "site-packages/", text)


def run_logged(cmd: list[str], env: dict, seconds: float, log: Path, quiet: bool = True) -> int:
    """``cmd`` in a session of its own, its output appended to ``log`` (Lightning's chatter left out when
    ``quiet``; paths as :func:`portable` writes them); the whole session is killed after ``seconds``. Returns the
    exit status (124 on the time-out)."""
    with open(log, "a") as f:
        f.write(portable(f"$ {shlex.join(cmd)}\n", log.parent))
        f.flush()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

        def copy() -> None:
            for line in proc.stdout:
                if not (quiet and QUIET.search(line)):
                    f.write(portable(line, log.parent))
                    f.flush()

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=max(seconds, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
        reader.join(timeout=10)
        f.write(f"exit {rc}\n")
    return rc


def pipeline_run(spec: str, rounds: int, out: Path) -> tuple[float, list[str]]:
    """The seconds and the command of a ``--pipeline`` set ``WORKLOADS@CONFIGS@STEPS@TAG@SECONDS[@EXTRA]``."""
    fields = spec.split("@")
    if len(fields) not in (5, 6):
        raise Stop(f"--pipeline {spec!r}: want WORKLOADS@CONFIGS@STEPS@TAG@SECONDS[@EXTRA ARGS]")
    workloads, configs, steps, tag, seconds = fields[:5]
    extra = shlex.split(fields[5] if len(fields) == 6 else "")
    own_rounds = any(word == "--rounds" or word.startswith("--rounds=") for word in extra)
    cmd = [sys.executable, "-m", "benchmarks", "pipeline-speed", "--workloads", workloads, "--configs", configs,
           "--steps", steps] + ([] if own_rounds else ["--rounds", str(rounds)]) + ["--tag", tag, "--out", str(out)]
    return float(seconds), cmd + extra


def suite_run(spec: str, out: Path) -> tuple[float, list[str]]:
    """The seconds and the command of a ``--run`` item ``"SECONDS SUITE ARGS"``."""
    words = shlex.split(spec.replace("{out}", str(out)))
    if len(words) < 2 or not words[0].replace(".", "", 1).isdigit():
        raise Stop(f"--run {spec!r}: want \"SECONDS SUITE [ARGS]\"")
    return float(words[0]), [sys.executable, "-m", "benchmarks", *words[1:]]


def run_all(runs: list[tuple[float, list[str]]], env: dict, gpus: list[str], deadline: float, log: Path) -> list:
    """Each run under its own seconds, capped by what is left before ``deadline``; with ``gpus``, one run per GPU
    at a time. Returns (command, exit status or None when not started) in the order given."""
    todo: queue.Queue = queue.Queue()
    for i, run in enumerate(runs):
        todo.put((i, run))
    done: list = [None] * len(runs)

    def worker(gpu: str | None) -> None:
        child = dict(env, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}))
        while True:
            try:
                i, (seconds, cmd) = todo.get_nowait()
            except queue.Empty:
                return
            left = deadline - time.monotonic()
            if left < MIN_SECONDS:
                done[i] = (cmd, None)
                continue
            print(f"== {shlex.join(cmd[3:])} (up to {min(seconds, left):.0f} s{f', GPU {gpu}' if gpu else ''})",
                  flush=True)
            done[i] = (cmd, run_logged(cmd, child, min(seconds, left), log))

    threads = [threading.Thread(target=worker, args=(g,)) for g in (gpus or [None])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def tables(out: Path) -> list[str]:
    """The table rows of the pipeline-speed results under ``out``, 400 characters at most each."""
    lines = []
    for md in sorted(out.glob("pipeline_runs-*.md")):
        rows = [line[:400] for line in md.read_text().splitlines() if line.startswith("| ")]
        lines += [f"== {md.name}", *rows]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", default=os.environ.get("OUT") or "/tmp/benchmarks-gpu",
                   help="where everything is written (default: $OUT, else %(default)s)")
    p.add_argument("--time-limit", type=float, default=570, help="seconds for the whole call (default 570)")
    p.add_argument("--tests", nargs="*", default=list(TESTS), help="GPU test paths (default: %(default)s)")
    p.add_argument("--no-tests", action="store_true")
    p.add_argument("--tests-timeout", type=float, default=170)
    p.add_argument("--pipeline", action="append", default=[], metavar="WORKLOADS@CONFIGS@STEPS@TAG@SECONDS")
    p.add_argument("--run", action="append", default=[], metavar='"SECONDS SUITE ARGS"')
    p.add_argument("--rounds", type=int, default=5, help="paired rounds of each --pipeline set")
    p.add_argument("--gpus", default="", help="e.g. 0,1: the runs spread over these GPUs, one at a time on each")
    p.add_argument("--code", default=os.environ.get("STREAMPROF_CODE", ""),
                   help="the code version the results record (a copy of the tree has no git history)")
    args = p.parse_args(argv)
    deadline = time.monotonic() + args.time_limit
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", STREAMPROF_BENCH_OUT=str(out),
               PYTHONPATH=os.pathsep.join(filter(None, [SITE, os.environ.get("PYTHONPATH")])))
    if not args.code and not _in_git():
        args.code = "unknown: a copy of the tree without its git history (--code names it)"
    if args.code:
        env["STREAMPROF_CODE"] = args.code
    try:
        runs = [pipeline_run(s, args.rounds, out) for s in args.pipeline] + [suite_run(s, out) for s in args.run]
        setup(env)
    except Stop as e:
        print(f"benchmarks gpu: {e}", file=sys.stderr)
        return 1
    tests_log = out / "gpu_tests.log"
    if not args.no_tests and args.tests:
        seconds = min(args.tests_timeout, deadline - time.monotonic())
        print(f"== GPU tests (up to {seconds:.0f} s)", flush=True)
        run_logged([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rfEs", *args.tests],
                   env, seconds, tests_log, quiet=False)
    done = run_all(runs, env, [g for g in args.gpus.split(",") if g], deadline, out / "runs.log")
    if tests_log.exists():
        print(*[line for line in tests_log.read_text().splitlines()
                if re.match(r"(FAILED|ERROR)|.*(passed|failed)", line)][-12:], sep="\n")
    for cmd, rc in done:
        print(f"{'not started (time limit)' if rc is None else f'exit {rc}'}: {shlex.join(cmd[3:])}")
    print(*tables(out), sep="\n")
    return 0 if all(rc == 0 for _, rc in done) else 1


if __name__ == "__main__":
    sys.exit(main())
