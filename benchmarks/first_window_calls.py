"""What Kineto's calls in the training thread cost in the first window, by the number of recorded steps and the
recording options: StreamProfiler's own timing of them (``recorder.first_window_calls``: prepare, start, stop).

    python -m benchmarks first-window-calls --active 1,2,3,5 --rounds 3

Each run trains the frozen-backbone segmentation (``examples/workloads.py``) in a process of its own for
``skip_first + warmup + active + 6`` steps with one window (``every=0``, ``max_overhead=None``); the configurations
(``default``; ``full``: ``with_stack``, ``profile_memory``, ``record_shapes``) and ``active`` values alternate within
each round. The table gives each call's median over the rounds and, per configuration, the least-squares line of
the stop's seconds against the recorded steps: what a window's stop costs at all and per recorded step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "examples"), HERE, ROOT]

from _record import code_version, command, machine, machine_line, now, results_dir  # noqa: E402

OPTIONS = {"default": {}, "full": {"with_stack": True, "profile_memory": True, "record_shapes": True}}
SKIP, WARMUP = 10, 2


def child(spec: dict) -> dict:
    import lightning as L
    import torch
    from workloads import FrozenBackboneSegmenter, SegmentationData

    from lightning_streamprof import StreamProfiler

    torch.set_num_threads(spec["threads"])
    L.seed_everything(0, verbose=False)
    steps = SKIP + WARMUP + spec["active"] + 6
    prof = StreamProfiler(dirpath=spec["out"], skip_first=SKIP, warmup=WARMUP, active=spec["active"], every=0,
                          max_overhead=None, analyze=False, **OPTIONS[spec["config"]])
    trainer = L.Trainer(max_steps=steps, accelerator="auto", devices=1, profiler=prof, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, default_root_dir=spec["out"])
    data = SegmentationData(spec["batch"], spec["image_size"], spec["batch"] * (steps + 1), workers=0)
    trainer.fit(FrozenBackboneSegmenter(width=32), datamodule=data)
    return dict(prof._profiled.recorder.first_window_calls)  # noqa: SLF001


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--active", default="1,2,3,5")
    p.add_argument("--configs", default="default,full")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--tag", default=None)
    args = p.parse_args(argv)
    import tempfile

    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"
    tag = args.tag or f"{'h200' if 'H200' in device else 'cpu'}-{now()[:10].replace('-', '')}"
    actives = [int(a) for a in args.active.split(",")]
    configs = args.configs.split(",")
    rows = []
    for rnd in range(args.rounds):
        order = [(c, a) for c in configs for a in actives]
        for config, active in (order if rnd % 2 == 0 else order[::-1]):
            with tempfile.TemporaryDirectory() as out:
                spec = {"config": config, "active": active, "batch": args.batch, "image_size": args.image_size,
                        "threads": args.threads, "out": out}
                proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                                      text=True, timeout=600)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            row = {"round": rnd, "config": config, "active": active}
            if proc.returncode == 0 and lines:
                row["calls"] = json.loads(lines[-1])
            else:
                row["error"] = proc.stderr.strip()[-500:]
            rows.append(row)
            print(json.dumps(row), flush=True)
    meta = {"device": device, "date": now(), "command": command("first_window_calls.py"), "machine": machine(),
            "torch": torch.__version__, "code": code_version()}
    text = render(rows, meta)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"first_window_calls-{tag}")
    with open(base + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    with open(base + ".md", "w") as f:
        f.write(text)
    print(text)


def render(rows: list[dict], meta: dict) -> str:
    ok = [r for r in rows if "calls" in r]
    lines = [f"# first_window_calls ({meta['device']}, {meta['date'][:10]})", "", f"`{meta['command']}`  ",
             f"{machine_line(meta['machine'])}; torch {meta['torch']}; code {meta['code']}", "",
             "| options | recorded steps | runs | prepare (ms) | start (ms) | stop (ms) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for config in dict.fromkeys(r["config"] for r in ok):
        for active in sorted({r["active"] for r in ok if r["config"] == config}):
            mine = [r["calls"] for r in ok if r["config"] == config and r["active"] == active]
            med = {k: 1e3 * statistics.median(c.get(k, 0.0) for c in mine) for k in ("prepare", "start", "stop")}
            lines.append(f"| {config} | {active} | {len(mine)} | {med['prepare']:.1f} | {med['start']:.1f} | "
                         f"{med['stop']:.1f} |")
    lines.append("")
    for config in dict.fromkeys(r["config"] for r in ok):
        points = [(r["active"], 1e3 * r["calls"].get("stop", 0.0)) for r in ok if r["config"] == config]
        if len({x for x, _ in points}) > 1:
            per_step, fixed = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
            lines.append(f"- {config}: Kineto's stop costs {fixed:.1f} ms + {per_step:.1f} ms per recorded step "
                         f"(least squares over {len(points)} runs)")
    errors = [r for r in rows if "error" in r]
    lines += [f"- failed: {r['config']} active={r['active']} round {r['round']}: {r['error'][-200:]}" for r in errors]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))), flush=True)
    else:
        main()
