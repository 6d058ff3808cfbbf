"""What StreamProfiler's hooks on Lightning's actions cost every step, with no window: as the profiler itself states
it (``profiler.cost.hook_per_step``: one step in 97 timed call by call, less a timed no-op call and less what its
scopes save against Lightning's), and as the run's median step shows it against no profiler.

    python benchmarks/hook_cost.py --steps 2000 --rounds 7

Each run fits a one-layer model (batch 4, about a millisecond a step on a small CPU, where the hooks weigh most), in
one process, the configurations alternated within each round (the order reversed every other round):

- ``none``: no profiler (Lightning's ``PassThroughProfiler``, whose generator scope every action pays);
- ``streamprof``: ``StreamProfiler(skip_first=10**9)``, the hooks without any window;
- ``lightning-scope``: the same with Lightning's generator scope for every action, as before the profiler gave
  actions its own scopes.

The first table gives, per configuration, the stated µs per step and the median step's µs, and per round the median
step's difference from ``none`` (the paired measure of what the hooks cost, which a noisy host blurs by more than the
hooks' cost). The second replays one training step's actions, as Lightning called them in a fit (scopes and direct
calls, the step's boundary call left out), through each configuration's live profiler in the middle of a fit: a hot
loop, with no noise from the step's own work, which understates what a cold call costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

from _record import code_version, command, machine, machine_line, now  # noqa: E402

CONFIGS = ("none", "streamprof", "lightning-scope")


def _fit(profiler, steps: int, callbacks: list) -> None:
    """Fit a one-layer model (batch 4) for ``steps`` steps on the CPU."""
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

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

    data = TensorDataset(torch.randn(steps * 4, 8), torch.randn(steps * 4, 1))
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, profiler=profiler, callbacks=callbacks)
    trainer.fit(Tiny(), DataLoader(data, batch_size=4))


def _lightning_scope() -> type:
    """StreamProfiler with Lightning's generator scope for every action, as before it gave actions its own."""
    from lightning.pytorch.profilers import Profiler

    from lightning_streamprof import StreamProfiler

    return type("LightningScope", (StreamProfiler,), {"profile": Profiler.profile})


def run(config: str, steps: int) -> dict:
    import lightning as L

    from lightning_streamprof import StreamProfiler

    class StepClock(L.Callback):
        """Each training step's start."""

        def __init__(self) -> None:
            self.starts: list[float] = []

        def on_train_batch_start(self, *args) -> None:
            self.starts.append(time.perf_counter())

    kinds = {"none": None, "streamprof": StreamProfiler, "lightning-scope": _lightning_scope()}
    prof = kinds[config](dirpath=tempfile.mkdtemp(prefix="streamprof-"), skip_first=10**9) if kinds[config] else None
    clock = StepClock()
    _fit(prof, steps, [clock])
    step = statistics.median(b - a for a, b in zip(clock.starts[10:], clock.starts[11:]))
    row = {"config": config, "step_us": step * 1e6}
    if prof is not None:
        cost = prof.cost
        row.update(hook_us_per_step=cost.hook_per_step * 1e6, hook_fraction=cost.hook_fraction,
                   samples=len(prof._hooks.samples))
    return row


REPLAY_STEP = 20  # the recorded step, and the step at which each profiler replays it
REPLAY_LOOPS = 2000


def replay(config: str) -> dict:
    """µs that one recorded step's actions take through ``config``'s profiler, replayed in a hot loop mid-fit."""
    import contextlib

    import lightning as L
    from lightning.pytorch.profilers import PassThroughProfiler, Profiler

    from lightning_streamprof import StreamProfiler

    class Recording(Profiler):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, str]] = []

        def profile(self, action_name):
            self.calls.append(("scope", action_name))
            return contextlib.nullcontext(action_name)

        def start(self, action_name) -> None:
            self.calls.append(("start", action_name))

        def stop(self, action_name) -> None:
            self.calls.append(("stop", action_name))

        def summary(self) -> str:
            return ""

    class Replay(L.Callback):
        def __init__(self, calls) -> None:
            self.calls, self.seconds = calls, None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if batch_idx != REPLAY_STEP:
                return
            prof = trainer.profiler
            seq = [(prof.profile if kind == "scope" else prof.start if kind == "start" else prof.stop, kind, a)
                   for kind, a in self.calls]
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(REPLAY_LOOPS):
                    for fn, kind, action in seq:
                        if kind == "scope":
                            with fn(action):
                                pass
                        else:
                            fn(action)
                best = min(best, (time.perf_counter() - t) / REPLAY_LOOPS)
            self.seconds = best

    rec = Recording()
    _fit(rec, REPLAY_STEP + 2, [])
    boundary = [i for i, c in enumerate(rec.calls) if c[0] == "start" and c[1].endswith("train_dataloader_next")]
    step = rec.calls[boundary[REPLAY_STEP] + 1:boundary[REPLAY_STEP + 1]]
    kinds = {"none": PassThroughProfiler, "streamprof": StreamProfiler, "lightning-scope": _lightning_scope()}
    prof = kinds[config]() if config == "none" else kinds[config](dirpath=tempfile.mkdtemp(prefix="streamprof-"),
                                                                  skip_first=10**9)
    probe = Replay(step)
    _fit(prof, REPLAY_STEP + 2, [probe])
    return {"config": config, "actions": sum(kind != "stop" for kind, _ in step), "replay_us": probe.seconds * 1e6}


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
    replays = [replay(config) for config in CONFIGS]
    print(json.dumps(replays), flush=True)
    m = machine()
    lines = [f"# hook_cost ({now()})", "", f"`{command('hook_cost.py')}`  ", f"code {code_version()}; {machine_line(m)}",
             "", "Median step (µs, from step 10) and the hooks' cost as the profiler states it; per round, the median"
             " step's difference from no profiler's.", "",
             "| config | stated hooks, µs per step (median) | stated share of the training time | median step, µs"
             " (median) | step - none's, µs, per round | median |", "| --- | ---: | ---: | ---: | --- | ---: |"]
    none = {r["round"]: r["step_us"] for r in rows if r["config"] == "none"}
    for config in CONFIGS:
        mine = [r for r in rows if r["config"] == config]
        step = statistics.median(r["step_us"] for r in mine)
        if config == "none":
            lines.append(f"| none | - | - | {step:.1f} | - | - |")
            continue
        diff = [r["step_us"] - none[r["round"]] for r in mine]
        lines.append(f"| {config} | {statistics.median(r['hook_us_per_step'] for r in mine):.1f} | "
                     f"{100 * statistics.median(r['hook_fraction'] for r in mine):.2f}% | {step:.1f} | "
                     f"{', '.join(f'{x:+.1f}' for x in diff)} | {statistics.median(diff):+.1f} |")
    none_replay = replays[0]["replay_us"]
    lines += ["", f"One step's {replays[0]['actions']} actions replayed through each live profiler ({REPLAY_LOOPS} loops,"
              " the best of 5):", "", "| config | µs per step | against none |", "| --- | ---: | ---: |"]
    lines += [f"| {r['config']} | {r['replay_us']:.2f} | {r['replay_us'] - none_replay:+.2f} |" for r in replays]
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"hook_cost-{args.tag}")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(base + ".json", "w") as f:
        json.dump({"benchmark": "hook_cost", "date": now(), "command": command("hook_cost.py"),
                   "code": code_version(), "machine": m, "rows": rows,
                   "replay": replays}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
