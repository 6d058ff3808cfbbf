"""Steps/s of serial Lightning, Lightning with StreamPipeline (auto, on) and hand-written loops, with the
ceilings that bound them: the loader's own rate (with the copy) and 1 / the GPU's busy time per serial step.

    python benchmarks/pipeline_throughput.py --workloads frozen:8,frozen:32,frozen:128,balanced:32

Workloads: ``frozen`` is the frozen-backbone segmentation example (examples/workloads.py, 256x256, loader
workers making int64 label maps); ``balanced`` has a frozen backbone and a trainable head of similar GPU
time and cheap data (resident in pinned host memory, no workers).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, ROOT)

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from workloads import Decoder, Encoder, FrozenBackboneSegmenter, SegmentationData  # noqa: E402

from lightning_streamprof import StreamPipeline  # noqa: E402


class Balanced(FrozenBackboneSegmenter):
    """Backbone and head of similar cost: the decoder is as deep as the encoder."""

    def __init__(self) -> None:
        super().__init__(width=32)
        self.decoder = Decoder(self.encoder.out_channels, 10, width=160)


def make(workload: str, batch: int, steps: int, workers: int):
    if workload == "frozen":
        data = SegmentationData(batch, 256, batch * (steps + 2), workers=workers)
        return FrozenBackboneSegmenter(), data.train_dataloader()
    g = torch.Generator().manual_seed(0)
    n = batch * 16
    x = torch.randint(0, 256, (n, 3, 128, 128), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 10, (n, 128, 128), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True, pin_memory=True, drop_last=True)
    return Balanced(), loader


class Clock(L.Callback):
    def __init__(self, skip: int) -> None:
        self.skip, self.t0, self.n0 = skip, None, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.t0 is None and trainer.global_step >= self.skip:
            torch.cuda.synchronize()
            self.t0, self.n0 = time.perf_counter(), trainer.global_step

    def rate(self, trainer) -> float:
        torch.cuda.synchronize()
        return (trainer.global_step - self.n0) / (time.perf_counter() - self.t0)


def lightning_rate(workload: str, batch: int, steps: int, workers: int, mode: str | None) -> tuple[float, str]:
    model, loader = make(workload, batch, steps, workers)
    clock = Clock(skip=150 if mode == "auto" else 30)
    pipe = None
    if mode:
        pipe = StreamPipeline(mode=mode.split("+")[0], backbone="encoder", cuda_graph=mode.endswith("+graph"))
    callbacks = [clock] + ([pipe] if pipe else [])
    trainer = L.Trainer(max_steps=steps, accelerator="gpu", devices=1, callbacks=callbacks, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, max_epochs=-1)
    trainer.fit(model, loader)
    note = callbacks[1].report().replace("\n", " | ") if mode else ""
    return clock.rate(trainer), note


def hand_rates(workload: str, batch: int, steps: int, workers: int) -> dict[str, float]:
    """The published style: serial loop, and the encoder of N+1 on a second stream while N trains."""
    model, loader = make(workload, batch, steps, workers)
    model = model.cuda()
    enc, dec = model.encoder.eval(), model.decoder.train()
    opt = torch.optim.SGD(dec.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    out = {}

    def batches():
        while True:
            yield from loader

    def train(feats, y):
        loss = loss_fn(dec(feats), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    it = batches()
    for phase in ("serial", "streams"):
        side = torch.cuda.Stream()
        pending = None
        for i in range(steps):
            if i == 30:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            x, y = next(it)
            if phase == "serial":
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                with torch.no_grad():
                    feats = enc(x)
                train(feats, y)
                continue
            with torch.cuda.stream(side):
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                with torch.no_grad():
                    feats = enc(x)
                ready = torch.cuda.Event()
                ready.record(side)
            if pending is not None:
                f0, y0, ev = pending
                torch.cuda.current_stream().wait_event(ev)
                f0.record_stream(torch.cuda.current_stream())
                y0.record_stream(torch.cuda.current_stream())
                train(f0, y0)
            pending = (feats, y, ready)
        torch.cuda.synchronize()
        out[phase] = (steps - 30) / (time.perf_counter() - t0)
    return out


def loader_rate(workload: str, batch: int, steps: int, workers: int) -> float:
    _, loader = make(workload, batch, steps, workers)
    n, t0 = 0, None
    while n < steps:
        for x, y in loader:
            x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            n += 1
            if n == 20:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            if n >= steps:
                break
    torch.cuda.synchronize()
    return (steps - 20) / (time.perf_counter() - t0)


def gpu_busy_rate(workload: str, batch: int) -> float:
    """1 / merged kernel time (all streams) per serial step, from a Kineto trace of 10 steps."""
    from torch.profiler import ProfilerActivity, profile

    model, loader = make(workload, batch, 40, 0 if workload == "balanced" else 2)
    model = model.cuda()
    opt = torch.optim.SGD(model.decoder.parameters(), lr=0.01)
    x, y = next(iter(loader))
    x, y = x.cuda(), y.cuda()

    def step():
        loss = model.loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type.name == "CUDA")
    busy, end = 0.0, float("-inf")
    for s, e in spans:
        if s > end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return 10 / (busy * 1e-6)


def _command_args() -> str:
    """The command line without ``--out DIR`` (a machine path)."""
    args, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            args.append(a)
    return " ".join(args)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="frozen:8,frozen:32,frozen:128,balanced:32")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    p.add_argument("--tag", default=None)
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    rows = []
    for spec in args.workloads.split(","):
        workload, batch = spec.split(":")
        batch = int(batch)
        row = {"workload": workload, "batch": batch}
        for mode in (None, "auto", "on", "on+graph"):
            rate, note = lightning_rate(workload, batch, args.steps, args.workers, mode)
            row[f"lightning_{mode or 'serial'}"] = rate
            if note:
                row[f"note_{mode}"] = note
        row.update({f"hand_{k}": v for k, v in hand_rates(workload, batch, args.steps, args.workers).items()})
        row["ceiling_loader"] = loader_rate(workload, batch, args.steps, args.workers)
        row["ceiling_gpu_busy"] = gpu_busy_rate(workload, batch)
        lower = min(row["ceiling_loader"], row["ceiling_gpu_busy"])
        best = max(row["lightning_auto"], row["lightning_on"], row["lightning_on+graph"])
        row["on_vs_lower_ceiling"] = row["lightning_on"] / lower
        row["auto_vs_serial"] = row["lightning_auto"] / row["lightning_serial"]
        row["best_vs_hand_streams"] = best / row["hand_streams"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    device = torch.cuda.get_device_name(0)
    now = datetime.datetime.now(datetime.timezone.utc)
    cols = ["lightning_serial", "lightning_auto", "lightning_on", "lightning_on+graph", "hand_serial", "hand_streams", "ceiling_loader",
            "ceiling_gpu_busy", "on_vs_lower_ceiling", "auto_vs_serial", "best_vs_hand_streams"]
    lines = [f"# pipeline_throughput ({device}, {now:%Y-%m-%d})", "",
             f"`python benchmarks/pipeline_throughput.py {_command_args()}`  ",
             f"torch {torch.__version__}, lightning {L.__version__}; steps/s, {args.steps} steps per run", "",
             "| workload | batch | " + " | ".join(cols) + " |", "| --- | ---: | " + " | ".join("---:" for _ in cols) + " |"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['batch']} | " + " | ".join(f"{r[c]:.3g}" for c in cols) + " |")
    lines += ["", "Decisions:"] + [f"- {r['workload']}:{r['batch']} auto: {r.get('note_auto', '')}" for r in rows]
    text = "\n".join(lines) + "\n"
    tag = args.tag or f"h200-{now:%Y%m%d}"
    os.makedirs(args.out, exist_ok=True)
    result = {"benchmark": "pipeline_throughput", "date": now.isoformat(timespec="seconds"), "device": device,
              "host": platform.machine(), "versions": {"torch": torch.__version__, "lightning": L.__version__},
              "args": {k: v for k, v in vars(args).items() if k != "out"}, "rows": rows}
    with open(os.path.join(args.out, f"pipeline_throughput-{tag}.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, f"pipeline_throughput-{tag}.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
