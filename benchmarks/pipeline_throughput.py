"""Steps/s of serial Lightning, Lightning with StreamPipeline and hand-written loops, with the ceilings that
bound them: the loader's own rate (with the copy) and 1 / the GPU's busy time per serial step.

    python -m benchmarks pipeline-throughput --workloads frozen:8,frozen:32,frozen:128,balanced:32,augment:16,augment:32,augment:64

Workloads: ``frozen`` is the frozen-backbone segmentation example (examples/workloads.py, 256x256, loader
workers making int64 label maps); ``balanced`` has a frozen backbone and a trainable head of similar GPU
time and cheap data (resident in pinned host memory, no workers); ``augment`` is the GPU-augmentation
classifier (examples/gpu_augmentation.py, 256x256, crop/resize/rotation/blur/normalize per sample in
``on_after_batch_transfer``).

Lightning columns: ``serial`` (no callback), StreamPipeline ``auto``, ``on`` (staging thread, the CUDA
default), ``on_inline`` (staging on the training thread), ``on+graph`` / ``on_inline+graph`` (the backbone
as a CUDA graph; backbone workloads only). Hand loops: ``hand_serial`` and ``hand_streams`` (the published style:
batch N+1's backbone forward or augmentation on a second stream while N trains). Each configuration runs
``--rounds`` times, in a rotated order per round; the table shows the median.
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
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from _bench import StepClock  # noqa: E402
from gpu_augmentation import Classifier, RandomImages  # noqa: E402
from workloads import Decoder, FrozenBackboneSegmenter, SegmentationData  # noqa: E402

from lightning_streamprof import StreamPipeline  # noqa: E402
from lightning_streamprof.analysis import intervals as iv  # noqa: E402
from _record import code_version, command, results_dir  # noqa: E402


SIZE = 256  # image side of the frozen and augment workloads (the balanced one uses half)


class Balanced(FrozenBackboneSegmenter):
    """Backbone and head of similar cost: the decoder is as deep as the encoder."""

    def __init__(self) -> None:
        super().__init__(width=32)
        self.decoder = Decoder(self.encoder.out_channels, 10, width=160)


def make(workload: str, batch: int, steps: int, workers: int):
    if workload == "augment":
        data = RandomImages(batch * (steps + 2), SIZE)
        loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=True,
                            drop_last=True, persistent_workers=workers > 0)
        return Classifier(SIZE), loader
    if workload == "frozen":
        data = SegmentationData(batch, SIZE, batch * (steps + 2), workers=workers)
        return FrozenBackboneSegmenter(), data.train_dataloader()
    g = torch.Generator().manual_seed(0)
    n = batch * 16
    x = torch.randint(0, 256, (n, 3, SIZE // 2, SIZE // 2), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 10, (n, SIZE // 2, SIZE // 2), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True, pin_memory=True, drop_last=True)
    return Balanced(), loader


def lightning_rate(workload: str, batch: int, steps: int, workers: int, mode: str | None) -> tuple[float, str]:
    # every mode skips the first 270 steps (auto's warm-up of 20 and its 8 trials of 30: serial, inline,
    # thread, thread with the backbone as a CUDA graph, twice) and times the next
    # steps - 30, so that all Lightning columns time the same part of a run
    steps, skip = steps + 240, 270
    model, loader = make(workload, batch, steps, workers)
    clock = StepClock(skip=skip)
    pipe = None
    if mode:
        # auto_serial: auto whose warm-up never ends, i.e. serial with the callback installed (its passive cost)
        pipe = StreamPipeline(mode=mode.split("+")[0].split("_")[0], backbone=False if workload == "augment" else "encoder",
                              cuda_graph=True if mode.endswith("+graph") else None if mode.startswith("auto") else False,
                              staging_thread=None if mode.startswith("auto") else not mode.startswith("on_inline"),
                              warmup=10**9 if mode == "auto_serial" else 20)
    callbacks = [clock] + ([pipe] if pipe else [])
    trainer = L.Trainer(max_steps=steps, accelerator="gpu", devices=1, callbacks=callbacks, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, max_epochs=-1)
    trainer.fit(model, loader)
    note = callbacks[1].report().replace("\n", " | ") if mode else ""
    return clock.rate(trainer), note


def hand_parts(workload: str, model: nn.Module):
    """The hand loops' pieces: ``prepare`` (augmentation, or the frozen encoder) for a batch on the device,
    the trained parameters, and ``loss(prepared, labels)`` of the trained part."""
    if workload == "augment":
        gen = torch.Generator(device="cuda").manual_seed(0)
        return (lambda x: model.augment(x, generator=gen)), model.parameters(), (
            lambda x, y: nn.functional.cross_entropy(model.net(x), y))
    encoder = model.encoder.eval()

    def prepare(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return encoder(x)

    return prepare, model.decoder.parameters(), (lambda feats, y: nn.functional.cross_entropy(model.decoder(feats), y))


def hand_rates(workload: str, batch: int, steps: int, workers: int) -> dict[str, float]:
    """The published style: a serial loop, and batch N+1's preparation (augmentation or frozen encoder) on a
    second stream while N trains."""
    model, loader = make(workload, batch, steps, workers)
    model = model.cuda().train()
    prepare, params, loss_of = hand_parts(workload, model)
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    out = {}

    def batches():
        while True:
            yield from loader

    def train(x, y):
        loss = loss_of(x, y)
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
                train(prepare(x), y)
                continue
            with torch.cuda.stream(side):
                x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                x = prepare(x)
                ready = torch.cuda.Event()
                ready.record(side)
            if pending is not None:
                x0, y0, ev = pending
                torch.cuda.current_stream().wait_event(ev)
                x0.record_stream(torch.cuda.current_stream())
                y0.record_stream(torch.cuda.current_stream())
                train(x0, y0)
            pending = (x, y, ready)
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
    model = model.cuda().train()
    x, y = next(iter(loader))
    x, y = x.cuda(), y.cuda()
    prepare, params, loss_of = hand_parts(workload, model)
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)

    def step():
        loss = loss_of(prepare(x), y)
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
    spans = np.array([(e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type.name == "CUDA"])
    busy_ns = iv.total(iv.merge(np.rint(spans[:, 0] * 1e3), np.rint(spans[:, 1] * 1e3)))  # µs -> ns
    return 10 / (busy_ns * 1e-9)


MODES = {"serial": None, "auto": "auto", "on": "on", "on_inline": "on_inline", "on+graph": "on+graph",
         "auto_serial": "auto_serial"}


def measure_workload(workload: str, batch: int, rounds: int, args: argparse.Namespace) -> dict:
    """Every configuration ``rounds`` times (order rotated each round); medians and each run."""
    configs = [m for m in MODES if not (workload == "augment" and m.endswith("+graph")) and m != "auto_serial"]
    configs += ["hand", "loader"] + ["auto_serial"] * bool(args.configs)  # auto_serial only when asked for
    configs = [c for c in configs if args.configs is None or c in args.configs.split(",")]
    runs: dict[str, list[float]] = {}
    notes: dict[str, str] = {}
    for r in range(rounds):
        k = r % len(configs)
        for config in configs[k:] + configs[:k]:
            if config == "hand":
                for name, rate in hand_rates(workload, batch, args.steps, args.workers).items():
                    runs.setdefault(f"hand_{name}", []).append(rate)
            elif config == "loader":
                runs.setdefault("ceiling_loader", []).append(loader_rate(workload, batch, args.steps, args.workers))
            else:
                rate, note = lightning_rate(workload, batch, args.steps, args.workers, MODES[config])
                runs.setdefault(f"lightning_{config}", []).append(rate)
                if note:
                    notes[config] = note
    row: dict = {"workload": workload, "batch": batch, "rounds": rounds}
    row.update({k: statistics.median(v) for k, v in runs.items()})
    row["ceiling_gpu_busy"] = gpu_busy_rate(workload, batch)
    lower = min(row.get("ceiling_loader", float("inf")), row["ceiling_gpu_busy"])
    pipelined = [row[k] for k in ("lightning_on", "lightning_on_inline", "lightning_on+graph") if k in row]
    best = max([row[k] for k in ("lightning_auto",) if k in row] + pipelined, default=None)
    if pipelined and "ceiling_loader" in row:
        row["on_vs_lower_ceiling"] = max(pipelined) / lower
    if "lightning_auto" in row and "lightning_serial" in row:
        row["auto_vs_serial"] = row["lightning_auto"] / row["lightning_serial"]
        row["auto_vs_serial_per_round"] = [a / b for a, b in zip(runs["lightning_auto"], runs["lightning_serial"])]
        row["auto_vs_serial_median_round"] = statistics.median(row["auto_vs_serial_per_round"])
    if "lightning_auto_serial" in row and "lightning_serial" in row:
        row["auto_serial_vs_serial_per_round"] = [
            a / b for a, b in zip(runs["lightning_auto_serial"], runs["lightning_serial"])]
        row["auto_serial_vs_serial"] = statistics.median(row["auto_serial_vs_serial_per_round"])
    if best is not None and "hand_streams" in row:
        row["best_vs_hand_streams"] = best / row["hand_streams"]
    if all(k in row for k in ("hand_streams", "hand_serial", "lightning_serial")):
        # the hand-written pipelined loop's step plus the host time Lightning's loop adds per step (serial
        # Lightning minus the serial hand loop): what a callback can reach when the host thread is the limit
        overhead_s = max(0.0, 1 / row["lightning_serial"] - 1 / row["hand_serial"])
        row["ceiling_lightning_host"] = 1 / (1 / row["hand_streams"] + overhead_s)
        if best is not None:
            row["best_vs_lightning_host"] = best / row["ceiling_lightning_host"]
    row["runs"] = runs
    row["notes"] = notes
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="frozen:8,frozen:32,frozen:128,balanced:32,augment:16,augment:32,augment:64")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--rounds", type=int, default=1, help="runs per configuration (a workload:batch:rounds spec overrides)")
    p.add_argument("--configs", default=None,
                   help="comma-separated subset of: " + ", ".join([*MODES, "hand", "loader"]) + " (default: all)")
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--tag", default=None)
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    rows = []
    for spec in args.workloads.split(","):
        workload, batch, *rounds = spec.split(":")
        row = measure_workload(workload, int(batch), int(rounds[0]) if rounds else args.rounds, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
        write(rows, args)


def write(rows: list[dict], args: argparse.Namespace) -> None:
    """The table so far (written after each workload, so that a run cut short keeps what it measured)."""
    device = torch.cuda.get_device_name(0)
    now = datetime.datetime.now(datetime.timezone.utc)
    cols = ["lightning_serial", "lightning_auto", "lightning_auto_serial", "lightning_on", "lightning_on_inline", "lightning_on+graph",
            "hand_serial", "hand_streams", "ceiling_loader", "ceiling_gpu_busy", "ceiling_lightning_host",
            "on_vs_lower_ceiling", "auto_vs_serial", "auto_serial_vs_serial", "best_vs_hand_streams", "best_vs_lightning_host"]
    lines = [f"# pipeline_throughput ({device}, {now:%Y-%m-%d})", "",
             f"`{command(__file__)}`  ", f"code {code_version()}  ",
             f"torch {torch.__version__}, lightning {L.__version__}; steps/s over {args.steps - 30} timed steps per run"
             " (Lightning: after 270 untimed steps, auto's trials), median of `rounds` runs; on_vs_lower_ceiling uses the best"
             " pipelined (on) column; ceiling_lightning_host = 1 / (1/hand_streams + 1/lightning_serial - 1/hand_serial),"
             " the hand-written pipelined loop plus Lightning's own host time per step", "",
             "| workload | batch | rounds | " + " | ".join(cols) + " |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in cols) + " |"]
    for r in rows:
        cells = [f"{r[c]:.3g}" if c in r else "-" for c in cols]
        lines.append(f"| {r['workload']} | {r['batch']} | {r['rounds']} | " + " | ".join(cells) + " |")
    paired = [r for r in rows if "auto_vs_serial_per_round" in r and r["rounds"] > 1]
    if paired:
        lines += ["", "auto / serial per round (runs of one round are back to back):"]
        lines += [f"- {r['workload']}:{r['batch']}: " + ", ".join(f"{x:.3f}" for x in r["auto_vs_serial_per_round"])
                  + f" (median {r['auto_vs_serial_median_round']:.3f})" for r in paired]
        lines += [f"- {r['workload']}:{r['batch']} auto_serial: " + ", ".join(
            f"{x:.3f}" for x in r["auto_serial_vs_serial_per_round"]) for r in paired if "auto_serial_vs_serial_per_round" in r]
    lines += ["", "Decisions of `auto` (last round):"]
    lines += [f"- {r['workload']}:{r['batch']}: {r['notes'].get('auto', '')}" for r in rows]
    text = "\n".join(lines) + "\n"
    tag = args.tag or f"h200-{now:%Y%m%d}"
    os.makedirs(args.out, exist_ok=True)
    result = {"benchmark": "pipeline_throughput", "date": now.isoformat(timespec="seconds"), "device": device,
              "host": platform.machine(), "command": command(__file__), "code": code_version(),
              "versions": {"torch": torch.__version__, "lightning": L.__version__},
              "args": {k: v for k, v in vars(args).items() if k != "out"}, "rows": rows}
    with open(os.path.join(args.out, f"pipeline_throughput-{tag}.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, f"pipeline_throughput-{tag}.md"), "w") as f:
        f.write(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
