"""What StreamProfiler's hooks on Lightning's actions cost every step, as the profiler itself measures it
(``profiler.cost.hook_per_step``: one step in 97 timed call by call, less a timed no-op call), with the quick skip of
the actions that no hook handles outside a window and without it.

    python benchmarks/hook_cost.py --steps 2000 --rounds 3

Each run fits a one-layer model (batch 4, about a millisecond a step on a small CPU, where the hooks weigh most)
with ``StreamProfiler(skip_first=10**9)``: the hooks without any window. The two configurations alternate within
each round; the table gives the hooks' microseconds per step and their share of the training time, per round and
their medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

from _record import code_version, command, machine, machine_line, now  # noqa: E402

CONFIGS = ("quick-skip", "no-skip")


def run(config: str, steps: int) -> dict:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_streamprof import StreamProfiler

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    prof = StreamProfiler(dirpath=tempfile.mkdtemp(prefix="streamprof-"), skip_first=10**9)
    if config == "no-skip":
        prof._learn = lambda action: False  # every action takes the full path, as before the quick return
    data = TensorDataset(torch.randn(steps * 4, 8), torch.randn(steps * 4, 1))
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, profiler=prof)
    trainer.fit(Tiny(), DataLoader(data, batch_size=4))
    cost = prof.cost
    return {"config": config, "hook_us_per_step": cost.hook_per_step * 1e6, "hook_fraction": cost.hook_fraction,
            "step_ms": cost.training_seconds / steps * 1e3, "samples": len(prof._hooks.samples)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    p.add_argument("--tag", default="cpu")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    for rnd in range(args.rounds):
        for config in CONFIGS if rnd % 2 == 0 else CONFIGS[::-1]:
            rows.append({"round": rnd, **run(config, args.steps)})
            print(json.dumps(rows[-1]), flush=True)
    m = machine()
    lines = [f"# hook_cost ({now()})", "", f"`{command('hook_cost.py')}`  ", f"code {code_version()}; {machine_line(m)}",
             "", "| config | hooks, µs per step (per round) | median | share of the training time (median) |"
             " step (ms, median) |", "| --- | --- | ---: | ---: | ---: |"]
    for config in CONFIGS:
        mine = [r for r in rows if r["config"] == config]
        us = [r["hook_us_per_step"] for r in mine]
        lines.append(f"| {config} | {', '.join(f'{x:.1f}' for x in us)} | {statistics.median(us):.1f} | "
                     f"{100 * statistics.median(r['hook_fraction'] for r in mine):.2f}% | "
                     f"{statistics.median(r['step_ms'] for r in mine):.2f} |")
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"hook_cost-{args.tag}")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(base + ".json", "w") as f:
        json.dump({"benchmark": "hook_cost", "date": now(), "command": command("hook_cost.py"),
                   "code": code_version(), "machine": m, "rows": rows}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
