"""What one profiling window costs, part by part, on the frozen-backbone workload (no Lightning, resident
data), so the profiler's per-window overhead can be attributed and reduced.

    python -m benchmarks window-cost --windows 12            # each Kineto setting in its own process
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {"default": {}, "TEARDOWN_CUPTI=0": {"TEARDOWN_CUPTI": "0"}}


def measure(args: argparse.Namespace) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch
    from torch.profiler import ProfilerActivity, profile
    from workloads import FrozenBackboneSegmenter

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    model = FrozenBackboneSegmenter().to(dev)
    opt = torch.optim.SGD(model.decoder.parameters(), lr=0.01)
    x = torch.randint(0, 256, (args.batch_size, 3, args.image_size, args.image_size), dtype=torch.uint8, device=dev)
    y = torch.randint(0, 10, (args.batch_size, args.image_size, args.image_size), device=dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model.loss(model(x), y).backward()
        opt.step()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def clock() -> float:
        sync()
        return time.perf_counter()

    for _ in range(20):
        step()
    steps = []
    for _ in range(60):
        t = clock()
        step()
        steps.append(clock() - t)
    base = statistics.median(steps)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    parts: dict[str, list[float]] = {k: [] for k in ("prepare", "warmup_step", "start", "active_steps", "stop", "export", "cost")}
    out = tempfile.mkdtemp()
    for w in range(args.windows):
        t0 = clock()
        prof = profile(activities=acts)
        prof.prepare_trace()
        t1 = clock()
        step()
        t2 = clock()
        prof.start_trace()
        t3 = clock()
        for _ in range(args.active):
            step()
        t4 = clock()
        prof.stop_trace()
        t5 = clock()
        prof.export_chrome_trace(os.path.join(out, f"w{w}.json"))
        t6 = clock()
        for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
            parts[k].append(v)
        parts["cost"].append((t6 - t0) - (1 + args.active) * base)
        for _ in range(5):
            step()
    size = os.path.getsize(os.path.join(out, f"w{args.windows - 1}.json"))
    later = {k: statistics.median(v[1:]) * 1e3 for k, v in parts.items()}
    return {"base_step_ms": base * 1e3, "first_window_ms": {k: v[0] * 1e3 for k, v in parts.items()},
            "later_windows_median_ms": later, "trace_bytes": size}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=12)
    p.add_argument("--active", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=256)
    p.add_argument("--repeat", type=int, default=2, help="rounds; the settings alternate within each")
    p.add_argument("--child", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    results = {}
    for r in range(args.repeat):
        names = list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]
        for name in names:
            cmd = [sys.executable, __file__, "--child", "--windows", str(args.windows), "--active", str(args.active),
                   "--batch-size", str(args.batch_size), "--image-size", str(args.image_size)]
            proc = subprocess.run(cmd, env={**os.environ, **VARIANTS[name]}, capture_output=True, text=True, check=True)
            results[f"{name} (round {r})"] = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = ["| setting | base step ms | window cost ms (first / later) | prepare | warmup step | start | active steps | stop | export |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in results.items():
        f, m = r["first_window_ms"], r["later_windows_median_ms"]
        lines.append(f"| {name} | {r['base_step_ms']:.2f} | {f['cost']:.1f} / {m['cost']:.1f} | " + " | ".join(
            f"{m[k]:.1f}" for k in ("prepare", "warmup_step", "start", "active_steps", "stop", "export")) + " |")
    text = "\n".join(lines)
    print(json.dumps(results, indent=1))
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
