"""What the CUDA allocator's records cost per training step, by kind, to choose what ``StreamProfiler`` keeps on
between windows (``oom_stacks``) and what a window's ``memory_snapshot=True`` costs.

    python -m benchmarks memory-history-cost --rounds 9 --block 40

The kinds (``torch.cuda.memory._record_memory_history``): ``off``; ``light``, the live allocations' Python stacks and
no history (``enabled="state", context="state", stacks="python"``: what ``oom_stacks=True`` keeps over a whole fit);
``history``, every alloc and free with Python stacks (``enabled="all", context="all", stacks="python"``: a window's
``memory_snapshot=True``); ``history+C++``, the same with C++ frames too (``stacks="all"``). Each workload trains on
the GPU in a plain loop (data on the device, so that nothing but the step is timed), the kinds in alternating blocks
``off K1 off K2 ... off`` of ``--block`` steps, each block synchronised at both ends; a kind's cost in a round is its
block's ms per step over the mean of the ``off`` blocks on either side, so that the host's drift cancels out. The
result: the median cost of each kind over ``--rounds`` rounds, with its spread, per workload.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

from _record import code_version, command, machine, machine_line, now, results_dir  # noqa: E402

KINDS = {
    "light": {"enabled": "state", "context": "state", "stacks": "python"},
    "history": {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 1_000_000},
    "history+C++": {"enabled": "all", "context": "all", "stacks": "all", "max_entries": 1_000_000},
}
#: workload -> (torchvision model, batch, image side, dtype of autocast or None)
WORKLOADS = {
    "resnet50:32": ("resnet50", 32, 224, None),
    "resnet50:32:bf16": ("resnet50", 32, 224, "bfloat16"),
    "resnet18:8": ("resnet18", 8, 112, None),
    "vit_b_16:32:bf16": ("vit_b_16", 32, 224, "bfloat16"),
}


def trainer(name: str):
    """One training step of the workload ``name`` (a closure over its model, optimizer and data on the GPU)."""
    import torch
    import torchvision
    from torch.nn import functional as F

    arch, batch, side, dtype = WORKLOADS[name]
    model = getattr(torchvision.models, arch)(num_classes=100).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(batch, 3, side, side, device="cuda").to(memory_format=torch.channels_last)
    labels = torch.randint(0, 100, (batch,), device="cuda")
    autocast = getattr(torch, dtype) if dtype else None

    def step() -> None:
        with torch.autocast("cuda", dtype=autocast, enabled=autocast is not None):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def block_ms(step, steps: int) -> float:
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / steps


def measure(name: str, rounds: int, block: int, warmup: int) -> dict:
    import torch

    record = torch.cuda.memory._record_memory_history
    step = trainer(name)
    for _ in range(warmup):
        step()
    costs: dict[str, list[float]] = {k: [] for k in KINDS}
    off_ms: list[float] = []
    for r in range(rounds):
        kinds = list(KINDS) if r % 2 == 0 else list(reversed(KINDS))  # the order reversed every other round
        before = block_ms(step, block)
        off_ms.append(before)
        for kind in kinds:
            record(**KINDS[kind])
            step()  # the first step under a kind is not timed
            ms = block_ms(step, block)
            record(enabled=None)
            step()
            after = block_ms(step, block)
            off_ms.append(after)
            costs[kind].append(ms / ((before + after) / 2) - 1)
            before = after
    out = {"off_ms_per_step": statistics.median(off_ms), "rounds": rounds, "block": block}
    for kind, values in costs.items():
        out[kind] = {"median": statistics.median(values), "min": min(values), "max": max(values),
                     "per_round": [round(v, 5) for v in values]}
    torch.cuda.empty_cache()
    return out


def markdown(result: dict) -> str:
    lines = [f"# memory_history_cost ({result['machine']['gpu']}, {result['date'][:10]})", "",
             f"`{result['command']}`  ",
             f"code {result['code']}, torch {result['torch']}; {machine_line(result['machine'])}",
             "", "Cost per training step of each kind of allocator record, against no record in the neighbouring "
             "blocks (median of the rounds, min to max):", "",
             "| workload | ms per step | " + " | ".join(KINDS) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in KINDS) + " |"]
    for name, r in result["workloads"].items():
        cells = [f"{100 * r[k]['median']:+.2f}% ({100 * r[k]['min']:+.1f} to {100 * r[k]['max']:+.1f})" for k in KINDS]
        lines.append(f"| {name} | {r['off_ms_per_step']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="resnet50:32,resnet50:32:bf16,resnet18:8,vit_b_16:32:bf16",
                        help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--block", type=int, default=40, help="steps per block")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--tag", default="h200")
    parser.add_argument("--out", default=str(results_dir(__file__)))
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("memory_history_cost: needs a CUDA device", file=sys.stderr)
        return 2
    m = machine()
    m["gpu"] = torch.cuda.get_device_name()
    result = {"date": now(), "command": command(__file__), "code": code_version(), "torch": torch.__version__,
              "machine": m, "workloads": {}}
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"memory_history_cost-{args.tag}")
    for name in args.workloads.split(","):
        result["workloads"][name] = measure(name, args.rounds, args.block, args.warmup)
        with open(stem + ".json", "w") as f:  # written as results come
            json.dump(result, f, indent=2)
        with open(stem + ".md", "w") as f:
            f.write(markdown(result))
        print(markdown(result).splitlines()[-1], flush=True)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
