"""What StreamProfiler's hooks on Lightning's actions cost every step, with no window: the hooks' cost is measured
here, not by the profiler.

    python -m benchmarks hook-cost --steps 2000 --rounds 7

Two measures, each against no profiler and against the same hooks behind Lightning's own action scope:

- the replay: one training step's actions, as Lightning called them in a fit (scopes and direct calls, the step's
  boundary call left out), replayed through each configuration's live profiler in the middle of a fit, in a hot
  loop (the best of 5), with no noise from the step's own work; a hot loop understates what a cold call costs;
- paired fits: a one-layer model (batch 4, about a millisecond a step on a small CPU, where the hooks weigh most),
  the configurations alternated within each round (the order reversed every other round), the median step of each
  fit and its difference from the round's fit with no profiler (which a noisy host blurs by more than the hooks'
  cost).

The configurations: ``none``, no profiler (Lightning's ``PassThroughProfiler``, whose generator scope every action
pays); ``streamprof``, ``StreamProfiler(skip_first=10**9)``, the hooks without any window; ``lightning-scope``, the
same with Lightning's generator scope for every action, as before the profiler gave actions scopes of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

from _record import code_version, command, machine, machine_line, now, results_dir  # noqa: E402

CONFIGS = ("none", "streamprof", "lightning-scope")
#: the recorded step, and the step at which each profiler replays it
REPLAY_STEP = 20
REPLAY_LOOPS = 2000


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


def profiler(config: str):
    """A fresh profiler of ``config`` (None: Lightning's own no-op profiler)."""
    from lightning.pytorch.profilers import PassThroughProfiler, Profiler

    from lightning_streamprof import StreamProfiler

    if config == "none":
        return PassThroughProfiler()
    cls = StreamProfiler if config == "streamprof" else type("LightningScope", (StreamProfiler,),
                                                              {"profile": Profiler.profile})
    return cls(dirpath=tempfile.mkdtemp(prefix="streamprof-"), skip_first=10**9)


def run(config: str, steps: int) -> dict:
    """The median step (µs, from step 10) of a fit of ``steps`` steps with ``config``'s profiler."""
    import lightning as L

    class StepClock(L.Callback):
        def __init__(self) -> None:
            self.starts: list[float] = []

        def on_train_batch_start(self, *args) -> None:
            self.starts.append(time.perf_counter())

    clock = StepClock()
    _fit(profiler(config), steps, [clock])
    return {"config": config, "step_us": statistics.median(b - a for a, b in zip(clock.starts[10:],
                                                                                  clock.starts[11:])) * 1e6}


def recorded_step() -> list[tuple[str, str]]:
    """One training step's profiler calls, ``(kind, action)`` with kind ``scope``, ``start`` or ``stop``, as Lightning
    makes them in a fit (the step's boundary call, which starts the next step, left out)."""
    from lightning.pytorch.profilers import Profiler

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

    rec = Recording()
    _fit(rec, REPLAY_STEP + 2, [])
    boundary = [i for i, c in enumerate(rec.calls) if c[0] == "start" and c[1].endswith("train_dataloader_next")]
    return rec.calls[boundary[REPLAY_STEP] + 1:boundary[REPLAY_STEP + 1]]


def replay(config: str, step: list[tuple[str, str]], loops: int = REPLAY_LOOPS) -> dict:
    """µs that the calls of ``step`` take through ``config``'s live profiler, replayed ``loops`` times mid-fit (the
    best of 5 rounds)."""
    import lightning as L

    class Replay(L.Callback):
        seconds: float | None = None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if batch_idx != REPLAY_STEP:
                return
            prof = trainer.profiler
            calls = {"scope": prof.profile, "start": prof.start, "stop": prof.stop}
            seq = [(calls[kind], kind == "scope", action) for kind, action in step]
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(loops):
                    for fn, scoped, action in seq:
                        if scoped:
                            with fn(action):
                                pass
                        else:
                            fn(action)
                best = min(best, (time.perf_counter() - t) / loops)
            self.seconds = best

    probe = Replay()
    _fit(profiler(config), REPLAY_STEP + 2, [probe])
    assert probe.seconds is not None, "the fit did not reach the replayed step"
    return {"config": config, "actions": sum(kind != "stop" for kind, _ in step), "replay_us": probe.seconds * 1e6}


def tables(rows: list[dict], replays: list[dict], loops: int = REPLAY_LOOPS) -> list[str]:
    """The markdown of the results: the replay against none's, then each round's median step against none's."""
    none_replay = next(r["replay_us"] for r in replays if r["config"] == "none")
    lines = [f"One step's {replays[0]['actions']} actions replayed through each live profiler ({loops} loops, the"
             " best of 5):", "", "| config | µs per step | against none |", "| --- | ---: | ---: |"]
    lines += [f"| {r['config']} | {r['replay_us']:.2f} | {r['replay_us'] - none_replay:+.2f} |" for r in replays]
    if not rows:
        return lines
    lines += ["", "Median step of each fit (µs, from step 10); per round, its difference from no profiler's:", "",
              "| config | median step, µs (median) | step - none's, µs, per round | median |",
              "| --- | ---: | --- | ---: |"]
    none = {r["round"]: r["step_us"] for r in rows if r["config"] == "none"}
    for config in CONFIGS:
        mine = [r for r in rows if r["config"] == config]
        step = statistics.median(r["step_us"] for r in mine)
        if config == "none":
            lines.append(f"| none | {step:.1f} | - | - |")
            continue
        diff = [r["step_us"] - none[r["round"]] for r in mine]
        lines.append(f"| {config} | {step:.1f} | {', '.join(f'{x:+.1f}' for x in diff)} | "
                     f"{statistics.median(diff):+.1f} |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--tag", default="cpu")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    step = recorded_step()
    replays = [replay(config, step) for config in CONFIGS]
    print(json.dumps(replays), flush=True)
    rows = []
    for rnd in range(args.rounds):
        for config in CONFIGS if rnd % 2 == 0 else CONFIGS[::-1]:
            rows.append({"round": rnd, **run(config, args.steps)})
            print(json.dumps(rows[-1]), flush=True)
    m = machine()
    lines = [f"# hook_cost ({now()})", "", f"`{command('hook_cost.py')}`  ",
             f"code {code_version()}; {machine_line(m)}", "", *tables(rows, replays)]
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"hook_cost-{args.tag}")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(base + ".json", "w") as f:
        json.dump({"benchmark": "hook_cost", "date": now(), "command": command("hook_cost.py"),
                   "code": code_version(), "machine": m, "rows": rows, "replay": replays}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
