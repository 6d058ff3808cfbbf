"""Host time per step that StreamPipeline adds, on a model of many tiny layers (the host is the limit):
serial Lightning, staging on the loop's thread (inline) and on the staging thread.

    python -m benchmarks pipeline-host-overhead [--device cpu|cuda] [--steps 1000] [--rounds 3]

Writes ``benchmarks/results/pipeline-host-overhead/pipeline_host_overhead-<tag>.{json,md}`` (tag: ``<device>-<date>``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from _bench import StepClock  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from lightning_streamprof import StreamPipeline  # noqa: E402
from _record import code_version, command as record_command, results_dir  # noqa: E402

CONFIGS = {"serial": None, "inline": False, "thread": True}


def stack(layers: int, width: int) -> nn.Sequential:
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())])


class TinyLayers(L.LightningModule):
    """A frozen backbone and a trainable head of ``layers`` small linear layers each."""

    def __init__(self, layers: int = 15, width: int = 32) -> None:
        super().__init__()
        self.backbone = stack(layers, width).requires_grad_(False)
        self.head = nn.Sequential(stack(layers, width), nn.Linear(width, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.head(self.backbone(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.head.parameters(), lr=0.01)


def ms_per_step(config: str, steps: int, accelerator: str) -> float:
    staging_thread = CONFIGS[config]
    clock = StepClock(skip=50)
    callbacks = [clock] + ([] if staging_thread is None else [StreamPipeline(mode="on", backbone="backbone",
                                                                             staging_thread=staging_thread)])
    trainer = L.Trainer(accelerator=accelerator, devices=1, max_steps=steps, callbacks=callbacks, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    x, y = torch.randn(4 * (steps + 2), 32), torch.randint(0, 2, (4 * (steps + 2),))
    trainer.fit(TinyLayers(), DataLoader(TensorDataset(x, y), batch_size=4))
    return 1e3 / clock.rate(trainer)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--tag", default=None, help="file name tag (default: <device>-<date>)")
    p.add_argument("--out", default=str(results_dir(__file__)))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    accelerator = "gpu" if args.device == "cuda" else "cpu"
    runs: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for r in range(args.rounds):
        order = list(CONFIGS)[r % 3:] + list(CONFIGS)[: r % 3]
        for config in order:
            runs[config].append(ms_per_step(config, args.steps, accelerator))
    median = {c: statistics.median(v) for c, v in runs.items()}
    now = datetime.datetime.now(datetime.timezone.utc)
    machine = torch.cuda.get_device_name(0) if args.device == "cuda" else f"{platform.machine()} CPU, {os.cpu_count()} cores"
    command = record_command(__file__)
    lines = [f"# pipeline_host_overhead ({machine}, {now:%Y-%m-%d})", "", f"`{command.strip()}`  ",
             f"code {code_version()}, torch {torch.__version__}, lightning {L.__version__}; ms per step after 50 steps, median of {args.rounds}"
             f" rounds of {args.steps} steps (order rotated)", "",
             "| config | ms/step | vs serial | runs |", "| --- | ---: | ---: | --- |"]
    for c in CONFIGS:
        lines.append(f"| {c} | {median[c]:.3f} | {median[c] - median['serial']:+.3f} |"
                     f" {', '.join(f'{v:.3f}' for v in runs[c])} |")
    text = "\n".join(lines) + "\n"
    tag = args.tag or f"{args.device}-{now:%Y%m%d}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"pipeline_host_overhead-{tag}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, f"pipeline_host_overhead-{tag}.json"), "w") as f:
        json.dump({"benchmark": "pipeline_host_overhead", "date": now.isoformat(timespec="seconds"), "machine": machine,
                   "command": command.strip(), "code": code_version(), "versions": {"torch": torch.__version__, "lightning": L.__version__},
                   "ms_per_step": median, "runs": runs}, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
