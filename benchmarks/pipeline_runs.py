"""Whole training runs as a user pays for them, serial against StreamPipeline, in paired rounds; 1 or 2 GPUs.

    python -m benchmarks pipeline-speed --workloads article:8,article:32,resnet50:32,resnet50:32:bf16 --rounds 5
    python -m benchmarks pipeline-speed --devices 2 --workloads resnet50:16 --configs serial,on,auto --rounds 5

Each run trains ``--steps`` steps and is timed from step 10 to its end (auto's trials and a profiler's windows
included). Every configuration runs once per round, in an order rotated each round, so that the host's drift
falls on all of them alike; the table gives the median steps/s, each configuration's ratio to serial per round
and its median. Workloads (``examples/workloads.py``: ``WORKLOADS``, written as people write them):

- ``article``: the frozen-backbone segmentation of the pipelining article; ``training_step`` calls
  ``self.encoder(images.float())`` on the uint8 batch (256x256, int64 label maps made by loader workers);
- ``resnet50``: a frozen torchvision ResNet-50 (``weights=None``, eval) with a linear head; ``training_step``
  normalises the uint8 224x224 batch before the backbone;
- ``augment``: the GPU-augmentation classifier (per-sample crop, resize, rotation, blur, normalize in
  ``on_after_batch_transfer``, this package's batch transforms); ``augmentv2``: the same augmentation as the
  article writes it, torchvision.transforms.v2 one image at a time;
- ``vit``, ``vitff``, ``ldm``, ``resnet50c``: real model libraries called their own way:
  a frozen timm ViT-S/16 linear probe through ``forward`` and through ``forward_features``/``forward_head``, a
  latent-diffusion fine-tuning step (frozen diffusers VAE encoder and CLIP text encoder, trainable UNet), and a
  frozen ResNet-50 under ``torch.compile``.

A third field picks the precision (``bf16`` -> ``bf16-mixed``, ``16`` -> ``16-mixed``). Configurations: ``serial``
(no callback), ``auto`` (``StreamPipeline()``, no arguments), ``on`` (``mode="on"``: staging thread, the frozen
calls as a CUDA graph when its capture is checked equal), ``on_inline``, ``on_thread`` (the staging thread also
without CUDA), ``on+graph`` (``cuda_graph=True``: the same as ``on`` now), ``on_eager`` (``cuda_graph=False``),
``copy`` (``backbone=False``, inline: the copy alone), ``copy_nopin`` (the same, ``pin_memory=False``),
``auto_hold`` (``mode="auto"`` whose first trials never come: what auto costs beside ``on`` without them); any of them
with ``+streamprof`` (``auto+streamprof``) also runs the default ``StreamProfiler``, as ``profiler="streamprof"``
gives it, with ``+streamprof-idle`` the same profiler with no window (its hooks, threads and worker only), and with
``+streamprof-late`` one window of the default options at the middle of the run: the median step after it against
the one before it, over the same ratio of the configuration alone (``_aftermath.py``), says whether a window slows
the steps that follow it; with ``+streamprof-swap`` the profiler with no window is swapped with Lightning's own
(``PassThroughProfiler``, a run's profiler without one) every 50 steps of the same run: the median step of its
blocks over that of the adjacent blocks under Lightning's says what its hooks and scopes do to the steps, free of
the drift between runs. A profiled configuration beside the same one alone gets, per round, the whole run's ratio
and that of the median step of each run's second half (far from the first window and auto's first trials): a loss
that the second half shares is not the windows'. ``--profile CONFIG,...`` adds a StreamProfiler window at step
``--profile-at`` to those configurations' last round (its traces and summary under ``--out``). Each ``auto``
run also gets what its trials cost inside the run (``_trial_cost.py``: their steps beyond the run's median step
outside them, as a share of the run), the part of auto against ``on`` that the drift between runs does not blur.
Every run also says where its wall time went (the setup up to the first batch, the steps before step 10, the timed
part, the end), the median of each in the table: what a set of rounds costs on the device beside what it times.
Under ``--devices 2`` Lightning's DDP launcher runs this script once per rank; rank 0 writes the results.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, ROOT)

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from _record import code_version, command, results_dir  # noqa: E402
import workloads  # noqa: E402
from _aftermath import after_before, lingering, swapped_blocks  # noqa: E402
from _trial_cost import trial_share  # noqa: E402
from _profiled_configs import LATE_PROFILER, SWAP_PROFILER, base_config, profiler_options  # noqa: E402
from lightning.pytorch.profilers import PassThroughProfiler  # noqa: E402

from lightning_streamprof import StreamPipeline, StreamProfiler  # noqa: E402

PRECISIONS = {"32": "32-true", "bf16": "bf16-mixed", "16": "16-mixed"}
CONFIGS = {
    "serial": None,
    "auto": {},
    "on": {"mode": "on"},
    "auto_hold": {"warmup": 10**9},  # auto that never reaches its trials: its steady state alone, against "on"
    "on_inline": {"mode": "on", "staging_thread": False},
    "on_thread": {"mode": "on", "staging_thread": True},  # the staging thread also without CUDA
    "on+graph": {"mode": "on", "cuda_graph": True},
    "on_eager": {"mode": "on", "cuda_graph": False},
    "copy": {"mode": "on", "backbone": False, "staging_thread": False},
    "copy_nopin": {"mode": "on", "backbone": False, "staging_thread": False, "pin_memory": False},
}
START = 10  # runs are timed from this step to their end
AFTER_TRIALS = 200  # auto's first trials are over by this step: a late window's "before" starts no earlier
SWAP_EVERY = 50  # steps between the swaps


class RunClock(L.Callback):
    """Wall time from global step ``START`` to the end of training, and device memory along the way; with
    ``auto`` (a StreamPipeline in ``mode="auto"``), whether each batch ran in its trials."""

    def __init__(self, auto: StreamPipeline | None = None) -> None:
        self.t0 = self.t1 = None
        self.n0 = self.n1 = 0
        self.mem_early = self.mem_end = 0
        self.auto = auto
        self.starts: list[float] = []  # host time at each batch start (no device sync): where a run loses time
        self.watched: list[bool] = []  # whether a profiler window or its export was under way at each
        self.in_trials: list[bool] = []  # whether auto was timing ways at each

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.starts.append(time.perf_counter())
        self.watched.append(bool(getattr(trainer.profiler, "in_window", False)))
        if self.auto is not None:
            self.in_trials.append(self.auto.state.in_trials)
        if self.t0 is None and trainer.global_step >= START:
            _sync(trainer)
            self.t0, self.n0 = time.perf_counter(), trainer.global_step
        if trainer.global_step == 100 and torch.cuda.is_available():
            self.mem_early = torch.cuda.memory_allocated()

    def on_train_end(self, trainer, pl_module) -> None:
        _sync(trainer)
        self.t1, self.n1 = time.perf_counter(), trainer.global_step
        if torch.cuda.is_available():
            self.mem_end = torch.cuda.memory_allocated()

    @property
    def rate(self) -> float:
        return (self.n1 - self.n0) / (self.t1 - self.t0)


class ProfilerSwap(L.Callback):
    """Every ``SWAP_EVERY`` steps, swaps the Trainer's profiler for ``other`` and back (Lightning's loops look it up
    at every action), and records for each batch whether the Trainer's own one was in place."""

    def __init__(self, other) -> None:
        self.other, self.own, self.flags = other, None, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.own is None:
            self.own = trainer.profiler
        if trainer.global_step and trainer.global_step % SWAP_EVERY == 0:
            trainer.profiler = self.other if trainer.profiler is self.own else self.own
        self.flags.append(trainer.profiler is self.own)

    def on_train_end(self, trainer, pl_module) -> None:
        trainer.profiler = self.own  # the Trainer's own profiler ends the stage


def _sync(trainer) -> None:
    if trainer.strategy.root_device.type == "cuda":
        torch.cuda.synchronize()


def make(workload: str, batch: int, steps: int, world: int, workers: int, image_size: int | None):
    n = batch * (steps + 2) * world * (2 if workload == "busy" else 1)  # the busy loop accumulates 2 batches
    try:
        return workloads.make(workload, batch, n, workers, image_size)
    except KeyError as e:
        raise SystemExit(f"pipeline_runs: {e.args[0]}") from None


def run(spec: tuple[str, int, str], config: str, args: argparse.Namespace, profile_dir: str | None) -> dict:
    workload, batch, precision = spec
    entered = time.perf_counter()
    L.seed_everything(0, verbose=False)
    model, loader = make(workload, batch, args.steps, args.devices, args.workers, args.image_size)
    pipe = None
    pipeline = CONFIGS[base_config(config)]
    if pipeline is not None:
        pipe = StreamPipeline(**pipeline)
    clock = RunClock(pipe if pipe is not None and pipe.mode == "auto" else None)
    callbacks: list[L.Callback] = [clock] if pipe is None else [pipe, clock]
    profiler = swap = None
    if profile_dir:
        profiler = StreamProfiler(dirpath=profile_dir, skip_first=args.profile_at, warmup=2, active=3, every=0,
                                  max_overhead=None, with_stack=args.profile_stack)
    elif (profiler_kwargs := profiler_options(config, args.steps)) is not None:
        profiler = StreamProfiler(dirpath=tempfile.mkdtemp(prefix="streamprof-"), **profiler_kwargs)
        if config.endswith(SWAP_PROFILER):  # Lightning's own profiler in every other block of steps
            swap = ProfilerSwap(PassThroughProfiler())
            callbacks.append(swap)
    options = dict(enable_checkpointing=False, limit_val_batches=0)
    val = None
    if workload == "busy":
        options = workloads.busy_trainer_options(tempfile.mkdtemp(prefix="ckpt-"))
        callbacks += options.pop("callbacks")
        # persistent validation workers, as Lightning's hint advises (they started at every validation before,
        # `pipeline_runs-h200-busy-val-20261201`: ~40% of the serial run with the checkpoints)
        val = DataLoader(workloads.DictImages(batch * 10, args.image_size or 224), batch_size=batch,
                         num_workers=args.workers, pin_memory=torch.cuda.is_available(),
                         persistent_workers=args.workers > 0)
    trainer = L.Trainer(max_steps=args.steps, accelerator=args.accelerator, devices=args.devices,
                        strategy="ddp" if args.devices > 1 else "auto", precision=PRECISIONS[precision],
                        callbacks=callbacks, logger=False, profiler=profiler, enable_progress_bar=False,
                        enable_model_summary=False, max_epochs=-1, **options)
    trainer.fit(model, loader, val)
    step_ms = [round((b - a) * 1e3, 3) for a, b in zip(clock.starts, clock.starts[1:])]
    out = {"rate": clock.rate, "mem_early_mb": clock.mem_early / 2**20, "mem_end_mb": clock.mem_end / 2**20,
           "rank": trainer.global_rank, "second_half_ms": second_half_ms(clock.starts), "step_ms": step_ms,
           "after_before": after_before(step_ms, args.steps, AFTER_TRIALS, clock.watched)}
    if swap is not None:
        out["swap"] = swapped_blocks(step_ms, swap.flags, AFTER_TRIALS)
    if clock.auto is not None:
        out["trial_share"] = trial_share(step_ms, clock.in_trials, START)
        out["auto_rounds"] = [{"step": r.step, "reason": r.reason, "choice": r.choice.key, "steps": r.steps}
                              for r in clock.auto.rounds]
    if pipe is not None:
        out["report"] = pipe.report()
        out["staged_outputs_used"] = {c.label: c.hits for c in pipe.staged_calls}
        out["pipelined_steps"] = pipe.staged_batches
    if profiler is not None:
        out["summary"] = profiler.summary()
    out["seconds"] = run_seconds(entered, clock, time.perf_counter())
    return out


def run_seconds(entered: float, clock: RunClock, left: float) -> dict[str, float]:
    """Where one run's wall time went: ``setup`` (the model, the loader, the Trainer, up to the first batch),
    ``early`` (the steps before ``START``), ``timed``, ``end`` (from the last step to the run's results, the
    pipeline's report included) and the ``whole``: what a set of rounds costs on the device, beside what it times."""
    first = clock.starts[0] if clock.starts else clock.t0
    return {"setup": first - entered, "early": clock.t0 - first, "timed": clock.t1 - clock.t0, "end": left - clock.t1,
            "whole": left - entered}


def seconds_line(seconds: dict[str, float]) -> str:
    """``34.2 s: setup 6.1, steps 0-9 3.0, timed 20.3, end 4.8``."""
    return (f"{seconds['whole']:.1f} s: setup {seconds['setup']:.1f}, steps 0-{START - 1} {seconds['early']:.1f},"
            f" timed {seconds['timed']:.1f}, end {seconds['end']:.1f}")


def rounds_line(rounds: list[dict]) -> str:
    """One run's rounds of trials: ``thread+graph (first, step 40, 30 steps), ...``; ``no choice`` without one."""
    return ", ".join(f"{r['choice']} ({r['reason']}, step {r['step']}, {r['steps']} steps)" for r in rounds) \
        or "no choice"


def second_half_ms(starts: list[float]) -> float:
    """Median milliseconds between batch starts over the run's second half."""
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    return statistics.median(gaps[len(gaps) // 2:]) * 1e3 if len(gaps) >= 2 else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="article:8,article:32,resnet50:32,resnet50:32:bf16")
    p.add_argument("--configs", default="serial,auto,on,on+graph")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--accelerator", default="gpu")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--profile", default="", help="configurations whose last round records a StreamProfiler window")
    p.add_argument("--profile-at", type=int, default=300)
    p.add_argument("--profile-stack", action="store_true", help="record Python stacks in the profiled windows")
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--tag", default=None)
    args = p.parse_args()
    torch.backends.cudnn.benchmark = True
    configs = args.configs.split(",")
    unknown = {c for c in configs if base_config(c) not in CONFIGS}
    if unknown:
        raise SystemExit(f"pipeline_runs: unknown configurations {sorted(unknown)}; known: {', '.join(CONFIGS)}")
    profiled = set(filter(None, args.profile.split(",")))
    rows = []
    for item in args.workloads.split(","):
        name, batch, *rest = item.split(":")
        spec = (name, int(batch), rest[0] if rest else "32")
        runs: dict[str, list[dict]] = {c: [] for c in configs}
        for r in range(args.rounds):
            k = r % len(configs)
            for config in configs[k:] + configs[:k]:
                last = r == args.rounds - 1
                pdir = os.path.join(args.out, "traces", f"{name}{batch}-{spec[2]}-{config}") if last and config in profiled else None
                res = run(spec, config, args, pdir)
                runs[config].append(res)
                if res["rank"] == 0:
                    print(f"{item} round {r} {config}: {res['rate']:.1f} steps/s ({seconds_line(res['seconds'])})",
                          flush=True)
            if res["rank"] == 0 and r < args.rounds - 1:  # the rounds so far, in case the call is cut short
                write(rows + [summarise(item, runs)], args)
        rows.append(summarise(item, runs))
        if rows[-1]["rank"] == 0:
            write(rows, args)


def summarise(item: str, runs: dict[str, list[dict]]) -> dict:
    rates = {c: [r["rate"] for r in rs] for c, rs in runs.items()}
    row: dict = {"workload": item, "rank": next(iter(runs.values()))[0]["rank"], "rates": rates,
                 "rounds": min(len(v) for v in rates.values()),
                 "median": {c: statistics.median(v) for c, v in rates.items()}}
    if "serial" in rates:
        row["vs_serial_per_round"] = {c: [a / b for a, b in zip(v, rates["serial"])] for c, v in rates.items()
                                      if c != "serial"}
        row["vs_serial"] = {c: statistics.median(v) for c, v in row["vs_serial_per_round"].items()}
    if "auto" in rates:  # auto against each fixed way, in the same rounds: what choosing for itself costs
        row["auto_vs_per_round"] = {c: [a / b for a, b in zip(rates["auto"], v)] for c, v in rates.items()
                                    if base_config(c) not in ("auto", "serial")}  # auto profiled: below
        row["auto_vs"] = {c: statistics.median(v) for c, v in row["auto_vs_per_round"].items()}
    # a profiled configuration against the same one alone, per round: the whole run's loss, and the second half's
    row["profiled_vs_alone_per_round"] = {
        c: {"whole": [b["rate"] / a["rate"] for a, b in zip(rs, runs[base_config(c)])],
            "second_half": [a["second_half_ms"] / b["second_half_ms"] for a, b in zip(rs, runs[base_config(c)])]}
        for c, rs in runs.items() if c != base_config(c) and base_config(c) in runs}
    # a window at the middle of the run: the steps after it against those before, over the same of the config alone
    row["lingering_per_round"] = {c: lingering([r["after_before"] for r in rs],
                                               [r["after_before"] for r in runs[base_config(c)]])
                                  for c, rs in runs.items() if c.endswith(LATE_PROFILER) and base_config(c) in runs}
    # the profiler swapped with Lightning's own every SWAP_EVERY steps: its blocks' median step over the others'
    row["swap_per_round"] = {c: [r["swap"]["ratio"] for r in rs if r.get("swap")] for c, rs in runs.items()
                             if c.endswith(SWAP_PROFILER)}
    # auto's trials: their steps beyond the run's typical step, as a share of the run (inside one run: no drift)
    row["trial_share_per_round"] = {c: [r["trial_share"] for r in rs] for c, rs in runs.items()
                                    if any(r.get("trial_share") is not None for r in rs)}
    # auto's rounds of trials in each run: the way each chose and the steps it took
    row["auto_rounds_per_round"] = {c: [r["auto_rounds"] for r in rs] for c, rs in runs.items()
                                    if all("auto_rounds" in r for r in rs)}
    last = {c: rs[-1] for c, rs in runs.items()}
    row["reports"] = {c: r.get("report", "") for c, r in last.items() if r.get("report")}
    row["staged_outputs_used"] = {c: [r.get("staged_outputs_used", 0), r.get("pipelined_steps", 0)]
                                  for c, r in last.items() if "report" in r}
    row["memory_mb"] = {c: [round(r["mem_early_mb"], 1), round(r["mem_end_mb"], 1)] for c, r in last.items()}
    row["summaries"] = {c: r["summary"] for c, r in last.items() if r.get("summary")}
    row["step_ms_last_round"] = {c: r["step_ms"] for c, r in last.items()}
    # the median run's seconds by part: what each round costs on the device, beside the part it times
    row["seconds_per_run"] = {c: {k: statistics.median(r["seconds"][k] for r in rs) for k in rs[0]["seconds"]}
                              for c, rs in runs.items()}
    return row


def write(rows: list[dict], args: argparse.Namespace) -> None:
    """The table so far (rewritten after each round, so that a run cut short keeps the rounds it finished)."""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "CPU"
    now = datetime.datetime.now(datetime.timezone.utc)
    configs = args.configs.split(",")
    lines = [f"# pipeline_runs ({args.devices} x {device}, {now:%Y-%m-%d})", "",
             f"`{command(sys.argv[0])}`  ",
             f"code {code_version()}, torch {torch.__version__}, lightning {L.__version__}; whole runs of {args.steps} steps timed from step"
             f" {START} (trials and windows included); steps/s per rank, median of"
             f" {'/'.join(str(r['rounds']) for r in rows)} paired rounds (of {args.rounds});"
             " `x serial`: median of the per-round ratios", "",
             "| workload | " + " | ".join(configs) + " | " + " | ".join(f"{c} x serial" for c in configs if c != "serial") + " |",
             "| --- | " + " | ".join("---:" for _ in configs) + " | " + " | ".join("---:" for c in configs if c != "serial") + " |"]
    for r in rows:
        ratios = [f"{r['vs_serial'][c]:.3f}" if c in r.get("vs_serial", {}) else "-" for c in configs if c != "serial"]
        lines.append(f"| {r['workload']} | " + " | ".join(f"{r['median'][c]:.1f}" for c in configs) + " | "
                     + " | ".join(ratios) + " |")
    lines += ["", "Per round, x serial (and auto x each fixed way):"]
    for r in rows:
        for c, v in r.get("vs_serial_per_round", {}).items():
            lines.append(f"- {r['workload']} {c}: " + ", ".join(f"{x:.3f}" for x in v))
    for r in rows:
        for c, v in r.get("auto_vs_per_round", {}).items():
            lines.append(f"- {r['workload']} auto x {c}: " + ", ".join(f"{x:.3f}" for x in v)
                         + f" (median {r['auto_vs'][c]:.3f})")
    trials = [(r["workload"], c, v) for r in rows for c, v in r.get("trial_share_per_round", {}).items()]
    if trials:
        lines += ["", "What auto's trials cost each run, inside the run: their steps' time beyond the run's median step"
                  " outside them, as a share of the run's time, per round:"]
        for workload, c, v in trials:
            lines.append(f"- {workload} {c}: " + ", ".join("no trials" if x is None else f"{x:.2%}" for x in v))
    choices = [(r["workload"], c, v) for r in rows for c, v in r.get("auto_rounds_per_round", {}).items()]
    if choices:
        lines += ["", "What auto chose in each run (the runs in round order, `;` between them): each of its rounds of"
                  " trials' choice, why it ran, the step it ended at and the steps it timed:"]
        for workload, c, v in choices:
            lines.append(f"- {workload} {c}: " + "; ".join(rounds_line(x) for x in v))
    profiled = [(r["workload"], c, v) for r in rows for c, v in r.get("profiled_vs_alone_per_round", {}).items()]
    if profiled:
        lines += ["", "The same configuration alone x with the profiler, per round (above 1: the profiled run slower):"
                  " whole runs, and the median step of each run's second half:"]
        for workload, c, v in profiled:
            lines.append(f"- {workload} {base_config(c)} x {c}: whole " + ", ".join(f"{x:.3f}" for x in v["whole"])
                         + f" (median {statistics.median(v['whole']):.3f}); second half "
                         + ", ".join(f"{x:.3f}" for x in v["second_half"])
                         + f" (median {statistics.median(v['second_half']):.3f})")
    late = [(r["workload"], c, v) for r in rows for c, v in r.get("lingering_per_round", {}).items() if v]
    if late:
        lines += ["", "A window at the middle of the run: its run's median step after it over the one before it,"
                  " against the same steps of the configuration alone, per round (above 1: the steps after the window"
                  " ran slower):"]
        for workload, c, v in late:
            lines.append(f"- {workload} {c}: " + ", ".join(f"{x:.3f}" for x in v)
                         + f" (median {statistics.median(v):.3f})")
    swaps = [(r["workload"], c, v) for r in rows for c, v in r.get("swap_per_round", {}).items() if v]
    if swaps:
        lines += ["", f"The profiler with no window swapped with Lightning's own every {SWAP_EVERY} steps, in one run:"
                  " the median step of its blocks over that of the adjacent blocks under Lightning's, the median over"
                  " the pairs, per round (above 1: the steps ran slower with the profiler in place):"]
        for workload, c, v in swaps:
            lines.append(f"- {workload} {c}: " + ", ".join(f"{x:.3f}" for x in v)
                         + f" (median {statistics.median(v):.3f})")
    lines += ["", "Seconds per run, the median over the rounds: the whole run (what the rounds cost on the device), the"
              f" setup (model, loader, Trainer, up to the first batch), steps 0-{START - 1}, the timed part and the end"
              " (from the last step to the run's results):"]
    for r in rows:
        for c, seconds in r["seconds_per_run"].items():
            lines.append(f"- {r['workload']} {c}: {seconds_line(seconds)}")
    lines += ["", "Staged backbone outputs used / steps pipelined, device memory at step 100 and at the end (MB),"
              " last round:"]
    for r in rows:
        for c, (used, piped) in r["staged_outputs_used"].items():
            lines.append(f"- {r['workload']} {c}: {used} / {piped}; memory {r['memory_mb'][c]}")
    lines += ["", "What the pipeline reported (last round):"]
    for r in rows:
        for c, text in r["reports"].items():
            lines.append(f"- {r['workload']} {c}: " + text.replace("\n", " | "))
    text = "\n".join(lines) + "\n"
    tag = args.tag or f"{'x'.join([str(args.devices)])}gpu-{now:%Y%m%d}"
    os.makedirs(args.out, exist_ok=True)
    result = {"benchmark": "pipeline_runs", "date": now.isoformat(timespec="seconds"), "device": device,
              "code": code_version(),
              "devices": args.devices, "host": platform.machine(),
              "command": command(sys.argv[0]),
              "versions": {"torch": torch.__version__, "lightning": L.__version__},
              "args": {k: v for k, v in vars(args).items() if k != "out"}, "rows": rows}
    with open(os.path.join(args.out, f"pipeline_runs-{tag}.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, f"pipeline_runs-{tag}.md"), "w") as f:
        f.write(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
