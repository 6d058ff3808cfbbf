"""Training throughput with no profiler, Lightning's PyTorchProfiler and StreamProfiler.

The frozen-backbone segmentation workload (examples/workloads.py) is trained once per configuration per
round, configurations alternating inside each round, all in this one process. Throughput is steps per
second from the first training batch to the end of ``trainer.fit`` (profiler clean-up included).

    python benchmarks/profiler_overhead.py                       # CPU-sized defaults
    python benchmarks/profiler_overhead.py --image-size 256 --batch-size 8 --workers 8 --steps 1000
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, ROOT)

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.callbacks import Callback  # noqa: E402
from lightning.pytorch.profilers import PyTorchProfiler  # noqa: E402
from workloads import FrozenBackboneSegmenter, SegmentationData  # noqa: E402

from lightning_streamprof import StreamProfiler  # noqa: E402


class FirstBatchClock(Callback):
    """Time of the first training batch's start (after the loader's start-up)."""

    def __init__(self) -> None:
        self.t0: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.t0 is None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.t0 = time.perf_counter()


def make_profiler(name: str, every: int, out: str):
    skip, warmup, active = 20, 1, 3
    if name == "none":
        return None
    if name == "pytorch-default":
        return PyTorchProfiler(dirpath=out, filename="pt")
    if name == "pytorch-once":
        sched = torch.profiler.schedule(skip_first=skip, wait=0, warmup=warmup, active=active, repeat=1)
        return PyTorchProfiler(dirpath=out, filename="pt", schedule=sched)
    if name == "pytorch-every":
        sched = torch.profiler.schedule(skip_first=skip, wait=every - warmup - active, warmup=warmup, active=active)
        return PyTorchProfiler(dirpath=out, filename="pt", schedule=sched)
    if name == "streamprof-default":
        return StreamProfiler(dirpath=out)
    if name == "streamprof-once":
        return StreamProfiler(dirpath=out, skip_first=skip, warmup=warmup, active=active, every=0, max_overhead=None)
    if name == "streamprof-every":
        return StreamProfiler(dirpath=out, skip_first=skip, warmup=warmup, active=active, every=every, max_overhead=None)
    raise ValueError(name)


def run_once(name: str, args: argparse.Namespace) -> dict:
    L.seed_everything(0, verbose=False)
    out = tempfile.mkdtemp(prefix=f"overhead-{name}-")
    profiler = make_profiler(name, args.every, out)
    clock = FirstBatchClock()
    trainer = L.Trainer(
        max_steps=args.steps,
        accelerator="auto",
        devices=1,
        profiler=profiler,
        callbacks=[clock],
        default_root_dir=out,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        precision=args.precision,
    )
    data = SegmentationData(args.batch_size, args.image_size, args.batch_size * (args.steps + 1), workers=args.workers)
    trainer.fit(FrozenBackboneSegmenter(width=args.width), datamodule=data)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - clock.t0
    row = {"config": name, "steps": trainer.global_step, "seconds": elapsed, "steps_per_s": trainer.global_step / elapsed}
    if profiler is not None:  # windows actually written, counted on disk
        row["windows"] = sum(f.endswith((".pt.trace.json", ".pt.trace.json.gz")) for _, _, fs in os.walk(out) for f in fs)
    if isinstance(profiler, StreamProfiler):
        row["measured_cost_s"] = profiler.overhead_seconds
    shutil.rmtree(out, ignore_errors=True)
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--every", type=int, default=27, help="window spacing of the equivalent schedules")
    p.add_argument("--precision", default="32-true")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument(
        "--configs",
        default="none,pytorch-default,streamprof-default,pytorch-once,streamprof-once,pytorch-every,streamprof-every",
    )
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    p.add_argument("--tag", default=None, help="name of the result files (default: machine and date)")
    args = p.parse_args(argv)
    configs = args.configs.split(",")
    if args.threads:
        torch.set_num_threads(args.threads)

    run_once("none", argparse.Namespace(**{**vars(args), "steps": 30}))  # warm caches, cudnn autotune
    rows = []
    for r in range(args.rounds):
        order = configs if r % 2 == 0 else configs[::-1]  # alternate the order between rounds
        for name in order:
            row = run_once(name, args)
            row["round"] = r
            rows.append(row)
            print(json.dumps(row), flush=True)

    base = statistics.median(x["steps_per_s"] for x in rows if x["config"] == "none") if "none" in configs else None
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
    now = datetime.datetime.now(datetime.timezone.utc)
    summary = []
    for name in configs:
        vals = [x["steps_per_s"] for x in rows if x["config"] == name]
        entry = {"config": name, "median_steps_per_s": statistics.median(vals), "runs": vals}
        if base:
            entry["vs_no_profiler"] = entry["median_steps_per_s"] / base
            paired = [
                x["steps_per_s"] / y["steps_per_s"]
                for x in rows if x["config"] == name
                for y in rows if y["config"] == "none" and y["round"] == x["round"]
            ]
            entry["paired_ratio_median"] = statistics.median(paired)
        wins = [x.get("windows") for x in rows if x["config"] == name and "windows" in x]
        if wins:
            entry["windows"] = wins
        summary.append(entry)
    result = {
        "benchmark": "profiler_overhead",
        "date": now.isoformat(timespec="seconds"),
        "machine": {"device": device, "host": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
        "versions": {"torch": torch.__version__, "lightning": L.__version__, "python": platform.python_version()},
        "command": "python benchmarks/profiler_overhead.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
        "workload": {k: getattr(args, k) for k in ("steps", "rounds", "image_size", "batch_size", "width", "workers", "every", "precision", "threads")},
        "summary": summary,
        "runs": rows,
    }
    tag = args.tag or f"{'h200' if 'H200' in device else 'cpu'}-{now:%Y%m%d}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"profiler_overhead-{tag}.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = [
        f"# profiler_overhead ({device}, {now:%Y-%m-%d})",
        "",
        f"`{result['command']}`  ",
        f"torch {torch.__version__}, lightning {L.__version__}; {args.steps} steps per run, {args.rounds} rounds, "
        f"image {args.image_size}, batch {args.batch_size}, {args.workers} loader workers",
        "",
        "| config | median steps/s | vs no profiler (medians) | vs no profiler (median of per-round ratios) | runs | trace files per run |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for e in summary:
        ratio = f"{e['vs_no_profiler']:.3f}x" if "vs_no_profiler" in e else ""
        paired = f"{e['paired_ratio_median']:.3f}x" if "paired_ratio_median" in e else ""
        runs = ", ".join(f"{v:.1f}" for v in e["runs"])
        lines.append(
            f"| {e['config']} | {e['median_steps_per_s']:.1f} | {ratio} | {paired} | {runs} | {e.get('windows', '')} |"
        )
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, f"profiler_overhead-{tag}.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
