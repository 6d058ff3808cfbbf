"""The step-time watch: what it costs per step, and whether its defaults stay quiet on noisy runs and fire on a
slowdown.

1. Cost: a recorder's step boundary between windows, with and without the watch (the watch's share of the hot
   path), and ``StepWatch.add`` alone, in ns per step (median of repeated rounds).
2. Quiet: simulated step times of many runs (lognormal noise, loader hiccups, slow drift of the host's speed,
   correlated noise), with the default thresholds: how many windows the watch would record that no slowdown caused.
3. Caught: the same runs slowed down by 1.15x to 2x from ``--slow-at``: the steps until the watch fires and the error
   of the step it names as the slowdown's start.
4. A real fit on this machine's CPU (``--fit-steps``; 0 leaves it out): a small Lightning model whose loader sleeps
   from step ``--fit-slow-at`` on, and the same fit without the sleep: the windows the watch records and what the
   slow one's report says.

Self-contained (no other benchmark module); results go to ``benchmarks/results/step-watch/`` as JSON and markdown
with the machine, the date and the command::

    python benchmarks/step_watch.py            # about a minute on one CPU core
    python benchmarks/step_watch.py --runs 200 --steps 20000
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lightning_streamprof.profiling.recorder import WindowRecorder  # noqa: E402
from lightning_streamprof.profiling.schedule import OverheadBudget, WindowSchedule  # noqa: E402
from lightning_streamprof.profiling.step_watch import StepWatch, WatchSettings  # noqa: E402
from lightning_streamprof.results.triggers import SLOWDOWN  # noqa: E402

BASE = 0.010  # seconds per step in the simulated runs

#: noise models: name -> (lognormal sigma, share of 2x hiccups, drift amplitude, drift period in steps, AR(1) phi)
NOISE = {
    "steady (sigma 3%)": (0.03, 0.0, 0.0, 1, 0.0),
    "noisy (sigma 10%, 2% hiccups)": (0.10, 0.02, 0.0, 1, 0.0),
    "very noisy (sigma 25%, 5% hiccups)": (0.25, 0.05, 0.0, 1, 0.0),
    "drifting host (+-10% over 2,000 steps)": (0.05, 0.01, 0.10, 2000, 0.0),
    "correlated (AR(1) phi 0.9, sigma 10%)": (0.10, 0.0, 0.0, 1, 0.9),
}
FACTORS = (1.15, 1.25, 1.5, 2.0)


def run_times(rng: random.Random, n: int, model: tuple, slow_at: int | None = None, factor: float = 1.0) -> list[float]:
    sigma, hiccups, drift, period, phi = model
    out, z = [], 0.0
    for i in range(n):
        z = phi * z + math.sqrt(1 - phi * phi) * rng.gauss(0, 1)
        t = BASE * math.exp(sigma * z) * (1 + drift * math.sin(2 * math.pi * i / period))
        if rng.random() < hiccups:
            t *= 2
        if slow_at is not None and i >= slow_at:
            t *= factor
        out.append(t)
    return out


def watch_run(times: list[float]) -> list:
    fired = []
    watch = StepWatch(WatchSettings(), lambda t: fired.append(t) or True)
    for i, t in enumerate(times):
        watch.add(t, i)
    return [t for t in fired if t.reason == SLOWDOWN]


def quiet_and_caught(runs: int, steps: int, slow_at: int, seed: int) -> dict:
    out = {}
    for name, model in NOISE.items():
        rng = random.Random(seed)
        false = sum(len(watch_run(run_times(rng, steps, model))) for _ in range(runs))
        caught = {}
        for factor in FACTORS:
            delays, errors, missed, early_n, repeats = [], [], 0, 0, 0
            for _ in range(runs):
                times = run_times(rng, slow_at + 1000, model, slow_at, factor)
                fired = watch_run(times)
                early = [t for t in fired if t.step < slow_at - 50]
                late = [t for t in fired if t.step >= slow_at - 50]
                early_n += len(early)
                repeats += max(0, len(late) - 1)
                if not late:
                    missed += 1
                    continue
                # the step it fired at: the check after the onset that saw it (the watch looks every 10 steps)
                delays.append(_fired_at(times, slow_at, late[0]))
                errors.append(abs(late[0].step - slow_at))
            caught[f"{factor:g}x"] = {
                "missed": missed, "fired_before_the_slowdown": early_n, "fired_again": repeats,
                "steps_to_fire_median": statistics.median(delays) if delays else None,
                "steps_to_fire_max": max(delays) if delays else None,
                "onset_error_median": statistics.median(errors) if errors else None,
                "onset_error_max": max(errors) if errors else None,
            }
        out[name] = {"runs": runs, "steps": steps, "windows_without_slowdown": false, "slowdown_at": slow_at,
                     "caught": caught}
    return out


def _fired_at(times: list[float], slow_at: int, trigger) -> int:
    """Steps after ``slow_at`` at which the watch fired (replayed: the step whose add() called it)."""
    seen = []
    watch = StepWatch(WatchSettings(), lambda t: seen.append(t) or True)
    for i, t in enumerate(times):
        watch.add(t, i)
        if any(s.reason == SLOWDOWN and s.step == trigger.step for s in seen):
            return i - slow_at
    return -1


def boundary_cost(steps: int, rounds: int) -> dict:
    """ns per step of a recorder's boundary between windows, without and with the watch, and of add() alone."""

    def recorder(watched: bool) -> WindowRecorder:
        schedule = WindowSchedule(skip_first=10**9, warmup=0, active=1, every=0)
        rec = WindowRecorder(schedule, OverheadBudget(None), None, lambda: None, lambda: 0, run_name="b", run_dir="b",
                             rank=0, world_size=1)
        if watched:
            rec.watch = StepWatch(WatchSettings(), lambda t: False, offset=lambda: rec.offset)
        return rec

    def one(watched: bool) -> float:
        rec = recorder(watched)
        first = lambda: 0  # noqa: E731
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            rec.step_boundary(first)
        return (time.perf_counter_ns() - t0) / steps

    def add_alone() -> float:
        watch = StepWatch(WatchSettings(), lambda t: False)
        times = run_times(random.Random(0), 4096, NOISE["noisy (sigma 10%, 2% hiccups)"])
        t0 = time.perf_counter_ns()
        for i in range(steps):
            watch.add(times[i & 4095], i)
        return (time.perf_counter_ns() - t0) / steps

    without, with_watch, alone = [], [], []
    for _ in range(rounds):  # alternating, so that the machine's drift falls on both alike
        without.append(one(False))
        with_watch.append(one(True))
        alone.append(add_alone())
    return {"steps_per_round": steps, "rounds": rounds,
            "boundary_ns_without_watch": statistics.median(without),
            "boundary_ns_with_watch": statistics.median(with_watch),
            "watch_ns_per_step": statistics.median(with_watch) - statistics.median(without),
            "add_ns_alone": statistics.median(alone)}


class _SlowLoader:
    """The small model of the fit (each step holds 4 ms of work, as a GPU step would), its loader sleeping ``sleep``
    seconds per item from item ``slow_at`` on."""

    @staticmethod
    def model(slow_at: int | None, sleep: float):
        from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
        from torch.utils.data import DataLoader

        class Data(RandomDataset):
            def __getitem__(self, index):
                if slow_at is not None and index >= slow_at:
                    time.sleep(sleep)
                return super().__getitem__(index)

        class Model(BoringModel):
            def train_dataloader(self):
                return DataLoader(Data(32, 100_000), batch_size=1)

            def training_step(self, batch, batch_idx):
                time.sleep(0.004)
                return super().training_step(batch, batch_idx)

        return Model()


class _GpuClassifier:
    """A real GPU workload: torchvision's ResNet-18 trained on 32 images of 112 px a step, the uint8 images converted
    and normalised in ``training_step`` as people write it; the loader sleeps ``sleep`` seconds per batch (spread over
    its items) from step ``slow_at`` on, as a loader that falls behind."""

    BATCH = 32

    @staticmethod
    def model(slow_at: int | None, sleep: float):
        import lightning as L
        import torch
        import torchvision
        from torch.nn import functional as F
        from torch.utils.data import DataLoader, Dataset

        batch = _GpuClassifier.BATCH
        pool = torch.randint(0, 256, (256, 3, 112, 112), dtype=torch.uint8)
        labels = torch.randint(0, 100, (256,))

        class Images(Dataset):
            def __len__(self):
                return 10**7

            def __getitem__(self, index):
                if slow_at is not None and index >= slow_at * batch:
                    time.sleep(sleep / batch)
                return pool[index % 256], labels[index % 256]

        class Classifier(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = torchvision.models.resnet18(num_classes=100)

            def train_dataloader(self):
                return DataLoader(Images(), batch_size=batch, pin_memory=True)

            def training_step(self, batch_, batch_idx):
                images, target = batch_
                images = (images.float() / 255 - 0.45) / 0.225
                return F.cross_entropy(self.net(images), target)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        return Classifier()


def real_fit(steps: int, slow_at: int, sleep: float, base: Path, device: str = "cpu") -> Iterator[tuple[str, dict]]:
    """A fit with and without the loader's sleep (the small CPU model, or on ``cuda`` :class:`_GpuClassifier`): the
    name of each, with its windows off the schedule and the slow one's explanation."""
    import lightning as L

    from lightning_streamprof import StreamProfiler
    from lightning_streamprof.report.slowdown import explanation_sentence, trigger_note

    make = _GpuClassifier.model if device == "cuda" else _SlowLoader.model
    for name, at in (("without a slowdown", None), (f"loader +{sleep * 1e3:g} ms from step {slow_at}", slow_at)):
        prof = StreamProfiler(dirpath=str(base / name.split()[0]), skip_first=20, every=0, max_overhead="auto")
        trainer = L.Trainer(max_steps=steps, accelerator=device if device == "cuda" else "cpu", devices=1,
                            profiler=prof, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            limit_val_batches=0, default_root_dir=str(base))
        t0 = time.perf_counter()
        trainer.fit(make(at, sleep))
        stage = prof._profiled
        triggers = stage.recorder.triggers
        yield name, {"steps": steps, "seconds": round(time.perf_counter() - t0, 2),
                     "baseline_ms": stage.off.watch.baseline * 1e3 if stage.off.watch and stage.off.watch.baseline else None,
                     "windows": [{"window": w.window, "first_step": w.first_step,
                                  "why": trigger_note(w.window, triggers.get(w.window))} for w in prof.windows],
                     "explained": [explanation_sentence(e) for e in stage.off.explained.values()],
                     "stalls": len(stage.off.watch.stalls) if stage.off.watch else 0,
                     "moved_by_the_budget": {str(w): step for w, step in stage.recorder.moves.items()}}


def markdown(result: dict) -> str:
    c = result["cost"]
    lines = [f"# step_watch ({result['machine']['host_kind']})", "",
             f"- date: {result['date']}", f"- machine: {result['machine']['line']}",
             f"- command: `{result['command']}`", "",
             "## Cost per step (median of alternating rounds)", "",
             f"- recorder step boundary between windows: {c['boundary_ns_without_watch']:.0f} ns without the watch, "
             f"{c['boundary_ns_with_watch']:.0f} ns with it: the watch adds {c['watch_ns_per_step']:.0f} ns per step",
             f"- `StepWatch.add` alone: {c['add_ns_alone']:.0f} ns per step",
             f"- at a 10 ms step that is {100 * c['watch_ns_per_step'] / 1e7:.4f}% of the step time", "",
             "## Windows without a slowdown, and slowdowns caught", "",
             "Default thresholds: the median of 50 steps >= 1.25x the baseline.", "",
             "| noise | windows without slowdown | factor | missed | steps to fire (median / max) | onset error "
             "(median / max) | fired before it | fired again |", "|---|---|---|---|---|---|---|---|"]
    for name, r in result["simulated"].items():
        for i, (factor, k) in enumerate(r["caught"].items()):
            quiet = f"{r['windows_without_slowdown']} in {r['runs']} runs of {r['steps']:,} steps"
            head = f"| {name} | {quiet} " if i == 0 else "| | "
            lines.append(f"{head}| {factor} | {k['missed']}/{r['runs']} | {k['steps_to_fire_median']} / "
                         f"{k['steps_to_fire_max']} | {k['onset_error_median']} / {k['onset_error_max']} | "
                         f"{k['fired_before_the_slowdown']} | {k['fired_again']} |")
    where = "CPU" if result.get("fit_device", "cpu") == "cpu" else f"GPU ({result.get('gpu')}, ResNet-18, batch 32)"
    for name, fit in result.get("fit", {}).items():
        ns = c["watch_ns_per_step"]
        share = f"; the watch's {ns:.0f} ns are {100 * ns / (fit['baseline_ms'] * 1e6):.4f}% of it" \
            if fit["baseline_ms"] else ""
        lines += ["", f"## A {where} fit, {name} ({fit['steps']:,} steps, {fit['seconds']} s)", "",
                  f"- the watch's baseline: {fit['baseline_ms']:.2f} ms a step{share}; stalls: {fit['stalls']}"
                  if fit["baseline_ms"] else "- the watch's baseline: none"]
        moved = fit.get("moved_by_the_budget", {})
        lines += [f"- window {w['window']} from step {w['first_step']:,}" + (f": {w['why']}" if w["why"] else
                                                                              " (the schedule's)")
                  + (f" (the overhead budget moved it from step {moved[str(w['window'])]:,})"
                     if str(w["window"]) in moved else "") for w in fit["windows"]]
        lines += [f"- {sentence}" for sentence in fit["explained"]]
    return "\n".join(lines) + "\n"


def _without_out(argv: list[str]) -> list[str]:
    """The arguments less ``--out DIR`` (a machine's path)."""
    out, skip = [], False
    for a in argv:
        if skip or a.startswith("--out"):
            skip = a == "--out"
            continue
        out.append(a)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="simulated runs per noise model and slowdown")
    parser.add_argument("--steps", type=int, default=10_000, help="steps of each simulated run without slowdown")
    parser.add_argument("--slow-at", type=int, default=2000, help="the step the injected slowdown starts at")
    parser.add_argument("--cost-steps", type=int, default=200_000, help="steps per round of the cost measurement")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of the cost measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fit-steps", type=int, default=2500, help="steps of the real CPU fits (0: none)")
    parser.add_argument("--fit-slow-at", type=int, default=1500, help="the step the fit's loader starts sleeping at")
    parser.add_argument("--fit-sleep", type=float, default=0.004, help="seconds the loader sleeps per item")
    parser.add_argument("--fit-device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: the small CPU model; cuda: ResNet-18 on the GPU")
    parser.add_argument("--host", default="cpu", help="the machine's kind in the result's name (cpu, h200host)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "step-watch"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"step_watch-{args.host}-{dt.date.today():%Y%m%d}"

    def write(result: dict) -> None:  # after each part, so that a call cut short keeps what it measured
        stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        stem.with_suffix(".md").write_text(markdown(result))

    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python benchmarks/step_watch.py", *_without_out(sys.argv[1:])]),
        "machine": {"host_kind": args.host, "cores": os.cpu_count(), "python": platform.python_version(),
                    "line": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                            f"Python {platform.python_version()}, {platform.platform()}"},
        "cost": boundary_cost(args.cost_steps, args.rounds), "simulated": {}, "fit_device": args.fit_device,
    }
    if args.fit_device == "cuda":
        import torch

        result["gpu"] = torch.cuda.get_device_name()
    write(result)
    result["simulated"] = quiet_and_caught(args.runs, args.steps, args.slow_at, args.seed)
    write(result)
    if args.fit_steps:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            result["fit"] = {}
            for name, fit in real_fit(args.fit_steps, args.fit_slow_at, args.fit_sleep, Path(tmp), args.fit_device):
                result["fit"][name] = fit
                write(result)
    print(markdown(result))
    print(f"wrote {stem}.json and .md")


if __name__ == "__main__":
    main()
