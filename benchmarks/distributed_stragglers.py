"""Stragglers on two ranks, end to end: Lightning DDP with StreamProfiler (live scores and the trace directory)
and a plain ``torch.profiler`` + ``DistributedDataParallel`` loop without Lightning (trace directory only), each
with rank 1 sleeping in every training step and balanced.

    python -m benchmarks distributed-stragglers                       # 2 GPUs, NCCL
    python -m benchmarks distributed-stragglers --accelerator cpu     # 2 processes, gloo

Each scenario runs in its own process (Lightning starts rank 1 by running the same command again); the
results (per-rank tables, straggler found or not) are saved as JSON and Markdown under ``--out`` and the
per-rank tables are printed last. Exit status 1 when a straggler is missed or a balanced run flags one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from _record import code_version, command, results_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = ("lightning-straggler", "lightning-balanced", "plain-straggler", "plain-balanced")
COLUMNS = ("rank", "step_ms", "computation_ms", "overlap_ms", "communication_ms", "other_ms", "sync_ms",
           "transfer_ms", "dataloader_ms", "relative_score", "straggler")


# ---------------------------------------------------------------------------------------------- workloads
def _model(width: int, layers: int):
    import torch

    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*blocks)


def lightning_worker(args: argparse.Namespace) -> None:
    """One Lightning DDP fit (rank 1 sleeps ``--sleep-ms`` per step in a straggler scenario)."""
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_streamprof import StreamProfiler
    from lightning_streamprof.results import to_builtins

    sleep_ms = args.sleep_ms if args.scenario.endswith("straggler") else 0.0

    class Work(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _model(args.width, args.layers)

        def training_step(self, batch, batch_idx):
            time.sleep((args.base_ms + (sleep_ms if self.global_rank == 1 else 0)) / 1000)
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-4)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(args.batch * 16, args.width)), batch_size=args.batch)

    profiler = StreamProfiler(dirpath=os.path.join(args.run_dir, "traces"), skip_first=5, warmup=2, active=5,
                              every=args.every, max_overhead=None, gather_timeout=60)
    trainer = L.Trainer(max_steps=args.steps, accelerator=args.accelerator, devices=2, strategy="ddp",
                        profiler=profiler, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, default_root_dir=args.run_dir)
    trainer.fit(Work())
    if trainer.global_rank == 0:
        with open(os.path.join(args.run_dir, "live.json"), "w") as f:
            json.dump([to_builtins(d) for d in profiler.distributed], f)


def _plain_rank(rank: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    cuda = args.accelerator != "cpu"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=2)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    model = DistributedDataParallel(_model(args.width, args.layers).to(device), device_ids=[rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    data = torch.randn(args.batch, args.width, device=device)
    sleep_ms = args.base_ms + (args.sleep_ms if args.scenario.endswith("straggler") and rank == 1 else 0.0)
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    handler = torch.profiler.tensorboard_trace_handler(os.path.join(args.run_dir, "traces"), worker_name=f"rank{rank}",
                                                       use_gzip=True)
    schedule = torch.profiler.schedule(wait=5, warmup=2, active=5, repeat=1)
    with torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=handler) as prof:
        for _ in range(14):
            time.sleep(sleep_ms / 1000)
            loss = model(data).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            prof.step()
    dist.destroy_process_group()


def plain_worker(args: argparse.Namespace) -> None:
    """A hand-written DDP loop under ``torch.profiler`` (no Lightning), two processes."""
    import torch.multiprocessing as mp

    mp.spawn(_plain_rank, args=(args,), nprocs=2, join=True)


# ---------------------------------------------------------------------------------------------- driver
def _run_scenario(args: argparse.Namespace, scenario: str) -> dict:
    from lightning_streamprof.api import analyze

    run_dir = os.path.join(args.work, f"{scenario}-{time.strftime('%H%M%S')}")
    os.makedirs(run_dir, exist_ok=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--scenario", scenario, "--run-dir", run_dir,
           "--accelerator", args.accelerator, "--steps", str(args.steps), "--every", str(args.every),
           "--sleep-ms", str(args.sleep_ms), "--base-ms", str(args.base_ms), "--width", str(args.width),
           "--layers", str(args.layers), "--batch", str(args.batch), "--port", str(args.port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"))}
    if args.accelerator == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    seconds = time.perf_counter() - t0
    out = {"scenario": scenario, "seconds": round(seconds, 1), "returncode": proc.returncode}
    if proc.returncode != 0:
        out["error"] = proc.stderr[-3000:]
        return out
    stats = analyze(os.path.join(run_dir, "traces")).distributed
    out["post_hoc"] = _table(stats)
    live_path = os.path.join(run_dir, "live.json")
    if os.path.exists(live_path):
        with open(live_path) as f:
            out["live"] = [{"window": w["windows"][0]["window"] if w["windows"] else None,
                            "stragglers": w["stragglers"], "missing_ranks": w["missing_ranks"],
                            "message": w["message"]} for w in json.load(f)]
    expect = [1] if scenario.endswith("straggler") else []
    found = [out["post_hoc"]["stragglers"]] + [w["stragglers"] for w in out.get("live", [])]
    out["expected_stragglers"] = expect
    out["ok"] = all(f == expect for f in found)
    out["warnings"] = [line[line.index("StreamProfiler: window"):] for line in proc.stderr.splitlines()
                       if "StreamProfiler: window" in line][:8]
    return out


def _table(stats) -> dict:
    if stats is None:
        return {"ranks": [], "stragglers": [], "message": None}
    return {"ranks": [{c: getattr(r, c) for c in COLUMNS} for r in stats.ranks], "stragglers": stats.stragglers,
            "message": stats.message, "windows": len(stats.windows),
            "comm_ops": [{"rank": o.rank, "name": o.name, "calls": o.calls, "total_bytes": o.total_bytes,
                          "mean_ms": o.mean_ns / 1e6, "mean_transfer_ms": o.mean_transfer_ns / 1e6}
                         for o in stats.comm_ops]}


def _markdown(results: list[dict], meta: dict) -> str:
    lines = [f"# distributed_stragglers — {meta['machine']}, {meta['date']}", "", f"`{meta['command']}`", ""]
    for r in results:
        head = f"## {r['scenario']}: {'OK' if r.get('ok') else 'FAILED'} ({r['seconds']} s)"
        lines += [head, ""]
        if "error" in r:
            lines += ["```", r["error"], "```", ""]
            continue
        lines += ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        for row in r["post_hoc"]["ranks"]:
            lines.append("| " + " | ".join(f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c])
                                           for c in COLUMNS) + " |")
        lines += ["", f"Post hoc ({r['post_hoc']['windows']} window(s)): stragglers {r['post_hoc']['stragglers']}. "
                  f"{r['post_hoc']['message'] or ''}"]
        for w in r.get("live", []):
            lines.append(f"- live window {w['window']}: stragglers {w['stragglers']}, missing {w['missing_ranks']}")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default="gpu", choices=["gpu", "cpu"])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", default=str(results_dir(__file__)))
    parser.add_argument("--tag", default=None, help="file name tag (default: h200 on GPU, cpu on CPU)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=15)
    parser.add_argument("--sleep-ms", type=float, default=None, help="rank 1's extra sleep per step "
                                                                     "(default 30 on GPU, 100 on CPU)")
    parser.add_argument("--base-ms", type=float, default=0.0, help="every rank's sleep per step")
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--port", type=int, default=29581)
    parser.add_argument("--timeout", type=int, default=150, help="seconds per scenario")
    parser.add_argument("--work", default=None, help="where the runs' traces go (default: a temporary directory)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cpu = args.accelerator == "cpu"
    args.width = args.width or (64 if cpu else 4096)
    args.batch = args.batch or (32 if cpu else 512)
    args.sleep_ms = args.sleep_ms if args.sleep_ms is not None else (100.0 if cpu else 30.0)
    if cpu and args.base_ms == 0.0:
        args.base_ms = 60.0  # CPU work on a shared machine jitters: a common sleep keeps balanced runs balanced
    if args.worker:
        (lightning_worker if args.scenario.startswith("lightning") else plain_worker)(args)
        return 0

    args.work = args.work or tempfile.mkdtemp(prefix="streamprof-stragglers-")
    os.makedirs(args.out, exist_ok=True)
    results = []
    for scenario in args.scenarios.split(","):
        results.append(_run_scenario(args, scenario))
        print(f"{scenario}: {'OK' if results[-1].get('ok') else 'FAILED'} in {results[-1]['seconds']} s", flush=True)
    date = time.strftime("%Y%m%d")
    tag = args.tag or ("cpu" if cpu else "h200")
    machine = f"{platform.machine()}, {os.cpu_count()} CPU cores"
    if not cpu:
        import torch

        machine = f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}, {machine}, torch {torch.__version__}"
    meta = {"machine": machine, "date": date,
            "command": command(__file__), "code": code_version()}
    base = os.path.join(args.out, f"distributed_stragglers-{tag}-{date}")
    with open(base + ".json", "w") as f:
        json.dump({**meta, "results": results}, f, indent=2)
    text = _markdown(results, meta)
    with open(base + ".md", "w") as f:
        f.write(text)
    print(text)
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
