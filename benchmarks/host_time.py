"""Where the host time of one training step goes: Lightning's SimpleProfiler per action, and the parts of the
hand-written serial loop timed on the host (no synchronisation inside the loop).

    python -m benchmarks host-time --workload augment --batch 16 --steps 300
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, ROOT)

import lightning as L  # noqa: E402
import torch  # noqa: E402
from lightning.pytorch.profilers import SimpleProfiler  # noqa: E402
from pipeline_throughput import hand_parts, make  # noqa: E402


def lightning_actions(workload: str, batch: int, steps: int, workers: int) -> None:
    model, loader = make(workload, batch, steps, workers)
    profiler = SimpleProfiler()
    trainer = L.Trainer(max_steps=steps, accelerator="gpu", devices=1, logger=False, profiler=profiler,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, max_epochs=-1)
    t0 = time.perf_counter()
    trainer.fit(model, loader)
    torch.cuda.synchronize()
    print(f"lightning serial: {steps / (time.perf_counter() - t0):.1f} steps/s (whole fit)")
    rows = sorted(((sum(d), len(d), a) for a, d in profiler.recorded_durations.items()), reverse=True)
    for total, n, action in rows[:25]:
        print(f"  {1e3 * total / steps:8.3f} ms/step  {n:6d} calls  {action}")


def hand_loop_parts(workload: str, batch: int, steps: int, workers: int) -> None:
    model, loader = make(workload, batch, steps, workers)
    model = model.cuda().train()
    prep, params, loss_of = hand_parts(workload, model)
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    parts: dict[str, float] = defaultdict(float)
    it = iter(loader)
    for i in range(steps):
        if i == 30:
            torch.cuda.synchronize()
            parts.clear()
            t_start = time.perf_counter()
        t0 = time.perf_counter()
        x, y = next(it)
        t1 = time.perf_counter()
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        t2 = time.perf_counter()
        x = prep(x)
        t3 = time.perf_counter()
        loss = loss_of(x, y)
        t4 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t5 = time.perf_counter()
        opt.step()
        t6 = time.perf_counter()
        for name, a, b in (("next(loader)", t0, t1), ("copy", t1, t2), ("prep", t2, t3), ("forward", t3, t4),
                           ("backward", t4, t5), ("optimizer", t5, t6)):
            parts[name] += b - a
    torch.cuda.synchronize()
    n = steps - 30
    print(f"hand serial: {n / (time.perf_counter() - t_start):.1f} steps/s")
    for name, total in parts.items():
        print(f"  {1e3 * total / n:8.3f} ms/step  {name}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="augment")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--workers", type=int, default=8)
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    hand_loop_parts(args.workload, args.batch, args.steps, args.workers)
    lightning_actions(args.workload, args.batch, args.steps, args.workers)


if __name__ == "__main__":
    main()
