"""Where a window's cost falls: each step's time by its place around the windows, and the CPU time of the training
process's threads and of the analysis worker, with StreamProfiler as it is, without its analysis worker, with all
recording options (``full``) and without a profiler; the budget's charged cost beside the slowdown measured from
outside.

    python -m benchmarks window-steps --steps 620 --every 60 --rounds 3
    python -m benchmarks window-steps --configs none,streamprof,full --tag cpu-20261201-saver

``none`` must be among ``--configs`` (the other configurations are measured against it).

The frozen-backbone segmentation workload (``examples/workloads.py``) trains in this process, a window (2 warm-up,
3 recorded steps) every ``--every`` steps from step 20 (``max_overhead=None``, so that every run has the same
windows); the configurations alternate within each round. A step's extra time is its mean time at that place of the
window cycle less the median step of the no-profiler runs of the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "examples"), HERE, ROOT]

import lightning as L  # noqa: E402
import torch  # noqa: E402
from _record import code_version, command, machine, machine_line, now  # noqa: E402
from workloads import FrozenBackboneSegmenter, SegmentationData  # noqa: E402

from lightning_streamprof import StreamProfiler  # noqa: E402
from suites import results_dir  # noqa: E402

SKIP, WARMUP, ACTIVE = 20, 2, 3
PLACES = ["warm-up 1", "warm-up 2", "recorded 1", "recorded 2", "recorded 3"] + [f"+{k}" for k in range(1, 16)]


class Clock(L.Callback):
    """Batch starts, and at the end of training the CPU seconds of each thread and of the analysis worker."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.threads: dict[str, float] = {}
        self.worker_cpu = None

    def on_train_start(self, trainer, pl_module) -> None:
        self._before = _threads_cpu()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.starts.append(time.perf_counter())

    def on_train_end(self, trainer, pl_module) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        for tid, cpu in _threads_cpu().items():
            name = "training thread" if tid == threading.main_thread().native_id else names.get(tid, "other")
            name = name.split(":")[0]  # streamprof-deadline:<what>
            self.threads[name] = self.threads.get(name, 0.0) + cpu - self._before.get(tid, 0.0)
        worker = getattr(getattr(getattr(trainer.profiler, "_profiled", None), "exporter", None), "_worker", None)
        proc = getattr(worker, "_proc", None)
        if proc is not None:
            self.worker_cpu = _cpu(f"/proc/{proc.pid}/stat")


def _threads_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process, by its native id."""
    return {int(tid): _cpu(f"/proc/self/task/{tid}/stat") for tid in os.listdir("/proc/self/task")}


def _cpu(stat: str) -> float:
    try:
        fields = open(stat).read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def run(config: str, args: argparse.Namespace) -> dict:
    L.seed_everything(0, verbose=False)
    out = tempfile.mkdtemp(prefix="window-steps-")
    kw = dict(dirpath=out, skip_first=SKIP, warmup=WARMUP, active=ACTIVE, every=args.every, max_overhead=None)
    profiler = {"none": None, "streamprof": lambda: StreamProfiler(**kw),
                "noanalysis": lambda: StreamProfiler(analyze=False, **kw),
                "full": lambda: StreamProfiler(with_stack=True, profile_memory=True, record_shapes=True, **kw)}[config]
    profiler = profiler() if profiler else None
    clock = Clock()
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, profiler=profiler, callbacks=[clock],
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, default_root_dir=out)
    data = SegmentationData(args.batch_size, args.image_size, args.batch_size * (args.steps + 1), workers=0)
    trainer.fit(FrozenBackboneSegmenter(width=32), datamodule=data)
    steps = [b - a for a, b in zip(clock.starts, clock.starts[1:])]
    row = {"config": config, "steps_ms": [round(1e3 * s, 3) for s in steps], "threads_cpu_s": clock.threads,
           "worker_cpu_s": clock.worker_cpu}
    if profiler is not None:
        row["charged_s"] = profiler.overhead_seconds
        row["windows"] = len(profiler.windows)
    return row


def by_place(steps_ms: list[float], every: int, base_ms: float) -> list[float]:
    """Mean extra ms of the steps at each place of the window cycle (:data:`PLACES`)."""
    sums = [[] for _ in PLACES]
    for i, ms in enumerate(steps_ms):
        if i < SKIP:
            continue
        place = (i - SKIP) % every
        if place < len(PLACES):
            sums[place].append(ms - base_ms)
    return [statistics.fmean(s) if s else 0.0 for s in sums]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=620)
    p.add_argument("--every", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--tag", default=None)
    p.add_argument("--configs", default="none,streamprof,noanalysis",
                   help="of none, streamprof, noanalysis, full (with_stack, profile_memory, record_shapes)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    configs = args.configs.split(",")
    runs = []
    for r in range(args.rounds):
        for config in configs if r % 2 == 0 else configs[::-1]:
            row = run(config, args)
            row["round"] = r
            runs.append(row)
            print(json.dumps({k: row.get(k) for k in ("round", "config", "charged_s", "windows", "worker_cpu_s")}),
                  flush=True)
    summary = {}
    for config in configs:
        places, excess, charged, threads, worker = [], [], [], {}, []
        for row in (x for x in runs if x["config"] == config):
            base = statistics.median(next(x for x in runs if x["config"] == "none" and x["round"] == row["round"])
                                     ["steps_ms"][SKIP:])
            places.append(by_place(row["steps_ms"], args.every, base))
            excess.append(sum(ms - base for ms in row["steps_ms"][SKIP:]) / 1e3)
            charged.append(row.get("charged_s"))
            worker.append(row.get("worker_cpu_s"))
            for name, cpu in row["threads_cpu_s"].items():
                threads.setdefault(name, []).append(cpu)
        summary[config] = {
            "extra_ms_by_place": [statistics.median(v) for v in zip(*places)],
            "excess_s": statistics.median(excess), "charged_s": _median(charged), "worker_cpu_s": _median(worker),
            "threads_cpu_s": {k: statistics.median(v) for k, v in threads.items()},
        }
    meta = {"benchmark": "window_steps", "date": now(), "command": command("window_steps.py"), "machine": machine(),
            "code": code_version(), "torch": torch.__version__, "lightning": L.__version__}
    tag = args.tag or f"cpu-{meta['date'][:10].replace('-', '')}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"window_steps-{tag}.json"), "w") as f:
        json.dump({**meta, "args": vars(args) | {"out": None}, "summary": summary, "runs": runs}, f)
    text = render(meta, args, summary)
    with open(os.path.join(args.out, f"window_steps-{tag}.md"), "w") as f:
        f.write(text)
    print(text)


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def render(meta: dict, args: argparse.Namespace, summary: dict) -> str:
    lines = [f"# window_steps ({machine_line(meta['machine'])}, {meta['date'][:10]})", "",
             f"`{meta['command']}`  ", f"torch {meta['torch']}, lightning {meta['lightning']}, code {meta['code']}; "
             f"{args.rounds} rounds of {args.steps} steps, a window every {args.every} steps from step {SKIP}, batch "
             f"{args.batch_size}, image {args.image_size}, {args.threads} torch thread(s); medians over the rounds", "",
             "Extra ms per step against the no-profiler run of the same round, by place in the window cycle:", "",
             "| config | " + " | ".join(PLACES) + " |", "| --- |" + " ---: |" * len(PLACES)]
    for config, s in summary.items():
        lines.append(f"| {config} | " + " | ".join(f"{v:.1f}" for v in s["extra_ms_by_place"]) + " |")
    lines += ["", "| config | slowdown over the run (s) | charged by the budget (s) | analysis worker CPU (s) | "
              "CPU of the training process's threads in training (s) |", "| --- | ---: | ---: | ---: | --- |"]
    for config, s in summary.items():
        threads = ", ".join(f"{k} {v:.2f}" for k, v in sorted(s["threads_cpu_s"].items(), key=lambda kv: -kv[1]))
        lines.append(f"| {config} | {s['excess_s']:.2f} | {_num(s['charged_s'])} | {_num(s['worker_cpu_s'])} | "
                     f"{threads} |")
    return "\n".join(lines) + "\n"


def _num(x):
    return "" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    main()
