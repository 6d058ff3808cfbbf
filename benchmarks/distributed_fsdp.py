"""FSDP and FSDP2 under Lightning with StreamProfiler: all-gathers and reduce-scatters found and matched across
ranks, their time hidden behind computation vs exposed, and an injected straggler flagged live and post hoc.

    python -m benchmarks distributed-fsdp                          # 2 GPUs, NCCL
    python -m benchmarks distributed-fsdp --devices 1              # 1 GPU (world 1)
    python -m benchmarks distributed-fsdp --accelerator cpu        # 2 processes, gloo

Scenarios: ``fsdp-straggler`` (``strategy="fsdp"``: FSDP1, each ``Linear`` wrapped), ``fsdp2-straggler``
(``ModelParallelStrategy`` with ``fully_shard`` on each ``Linear`` and the root), ``fsdp2-balanced``, and with
``--devices 1`` ``fsdp-one`` / ``fsdp2-one``. In a straggler scenario rank 1 sleeps ``--sleep-ms`` more per step.
On CPU, Lightning accepts FSDP only from a subclass of ``FSDPStrategy`` and passes no device to FSDP, so the
module wraps its layers itself (``device_id=cpu``), which Lightning then leaves as they are.

Each scenario runs in its own process (``--parallel``: at once, each on its own port); the results (per-rank
tables, collectives by kind with hidden and exposed time, matched calls, stragglers) are saved as JSON and
Markdown under ``--out``. Exit status 1 when a scenario misses what it checks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from suites import results_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWO_RANKS = ("fsdp-straggler", "fsdp2-straggler", "fsdp2-balanced")
ONE_RANK = ("fsdp-one", "fsdp2-one")
COLUMNS = ("rank", "step_ms", "computation_ms", "overlap_ms", "communication_ms", "other_ms", "sync_ms",
           "transfer_ms", "relative_score", "straggler")


# ---------------------------------------------------------------------------------------------- the fit
def worker(args: argparse.Namespace) -> None:
    """One Lightning fit under FSDP or FSDP2 (rank 1 sleeps ``--sleep-ms`` more per step in a straggler scenario)."""
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_streamprof import StreamProfiler
    from lightning_streamprof.results import to_builtins

    fsdp2 = args.scenario.startswith("fsdp2")
    cpu = args.accelerator == "cpu"
    extra = args.sleep_ms if args.scenario.endswith("straggler") else 0.0

    class Work(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            layers = []
            for _ in range(args.layers):
                layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
            self.net = torch.nn.Sequential(*layers)

        def configure_model(self) -> None:
            if fsdp2:
                from torch.distributed.fsdp import fully_shard

                mesh = self.device_mesh["data_parallel"]
                for m in self.net:
                    if isinstance(m, torch.nn.Linear):
                        fully_shard(m, mesh=mesh)
                fully_shard(self.net, mesh=mesh)
            elif cpu:
                from torch.distributed.fsdp import FullyShardedDataParallel

                for i, m in enumerate(self.net):
                    if isinstance(m, torch.nn.Linear):
                        self.net[i] = FullyShardedDataParallel(m, device_id=torch.device("cpu"))

        def training_step(self, batch, batch_idx):
            time.sleep((args.base_ms + (extra if self.global_rank == 1 else 0)) / 1000)
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-4)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(args.batch * 8, args.width)), batch_size=args.batch)

    if fsdp2:
        from lightning.pytorch.strategies import ModelParallelStrategy

        strategy = ModelParallelStrategy(data_parallel_size=args.devices, tensor_parallel_size=1)
    else:
        from lightning.pytorch.strategies import FSDPStrategy

        class CPUFSDPStrategy(FSDPStrategy):
            """Lightning refuses ``FSDPStrategy`` itself on CPU, not a subclass."""

        strategy = CPUFSDPStrategy() if cpu else FSDPStrategy(auto_wrap_policy={torch.nn.Linear})
    if cpu:
        torch.set_num_threads(1)
    profiler = StreamProfiler(dirpath=os.path.join(args.run_dir, "traces"), skip_first=4, warmup=1, active=5,
                              every=args.every, max_overhead=None, gather_timeout=60, record_shapes=True)
    trainer = L.Trainer(max_steps=args.steps, accelerator=args.accelerator, devices=args.devices, strategy=strategy,
                        profiler=profiler, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, default_root_dir=args.run_dir)
    trainer.fit(Work())
    if trainer.global_rank == 0:
        with open(os.path.join(args.run_dir, "live.json"), "w") as f:
            json.dump([to_builtins(d) for d in profiler.distributed], f)
    print(f"rank {trainer.global_rank} done, {len(profiler.windows)} windows", flush=True)


# ---------------------------------------------------------------------------------------------- checks
def _summary(stats) -> dict:
    from lightning_streamprof.report.distributed import collectives_by_kind

    if stats is None:
        return {"ranks": [], "stragglers": [], "kinds": [], "matched_by_seq": 0, "message": None}
    return {"ranks": [{c: getattr(r, c) for c in COLUMNS} for r in stats.ranks], "stragglers": stats.stragglers,
            "missing_ranks": stats.missing_ranks, "message": stats.message, "windows": len(stats.windows),
            "kinds": collectives_by_kind(stats),
            "names": sorted({(o.name, o.kind) for o in stats.comm_ops}),
            "matched_by_seq": sum(1 for ls in stats.late_starts if ls.seq is not None),
            "late_starts": len(stats.late_starts)}


def _check(scenario: str, post: dict, live: list[dict] | None, devices: int) -> list[str]:
    """What a scenario must show; the failures, one line each."""
    problems = []
    kinds = {k["kind"] for k in post["kinds"]}
    if devices > 1 or not scenario.endswith("one"):
        for needed in ("all_gather", "reduce_scatter"):
            if needed not in kinds:
                problems.append(f"no {needed} found (kinds: {sorted(kinds)}, names: {post.get('names')})")
        if any(k["hidden_ns"] is None for k in post["kinds"]):
            problems.append("hidden time not measured")
        expect = [1] if scenario.endswith("straggler") else []
        if post["stragglers"] != expect:
            problems.append(f"post hoc stragglers {post['stragglers']}, expected {expect}")
        for w in live or [{"stragglers": None, "missing_ranks": None}]:
            if w["stragglers"] != expect or w["missing_ranks"]:
                problems.append(f"live window: stragglers {w['stragglers']} missing {w['missing_ranks']}")
    elif post["kinds"] and not kinds <= {"all_gather", "reduce_scatter", "all_reduce", "broadcast", "other"}:
        problems.append(f"unexpected collectives {sorted(kinds)}")
    return problems


def run_scenario(args: argparse.Namespace, scenario: str, port: int) -> dict:
    from lightning_streamprof.api import analyze

    devices = 1 if scenario.endswith("one") else args.devices
    run_dir = os.path.join(args.work, f"{scenario}-{time.strftime('%H%M%S')}")
    os.makedirs(run_dir, exist_ok=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--scenario", scenario, "--run-dir", run_dir,
           "--accelerator", args.accelerator, "--devices", str(devices), "--steps", str(args.steps),
           "--every", str(args.every), "--sleep-ms", str(args.sleep_ms), "--base-ms", str(args.base_ms),
           "--width", str(args.width), "--layers", str(args.layers), "--batch", str(args.batch)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE"))}
    env["MASTER_PORT"] = str(port)
    if args.accelerator == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    out = {"scenario": scenario, "devices": devices, "seconds": round(time.perf_counter() - t0, 1),
           "returncode": proc.returncode}
    if proc.returncode != 0:
        out.update(ok=False, error=proc.stderr[-3000:])
        return out
    try:
        stats = analyze(os.path.join(run_dir, "traces")).distributed
    except Exception as err:  # noqa: BLE001 - a scenario's failure is its result, the others still run
        out.update(ok=False, error=f"reading the traces: {err}")
        return out
    out["post_hoc"] = _summary(stats)
    live_path = os.path.join(run_dir, "live.json")
    if devices > 1 and os.path.exists(live_path):
        with open(live_path) as f:
            out["live"] = [{"stragglers": w["stragglers"], "missing_ranks": w["missing_ranks"],
                            "message": w["message"]} for w in json.load(f)]
    out["problems"] = _check(scenario, out["post_hoc"], out.get("live"), devices)
    out["ok"] = not out["problems"]
    out["warnings"] = [line[line.index("StreamProfiler:"):][:300] for line in proc.stderr.splitlines()
                       if "StreamProfiler:" in line][:6]
    return out


def _markdown(results: list[dict], meta: dict) -> str:
    lines = [f"# distributed_fsdp — {meta['machine']}, {meta['date']}", "", f"`{meta['command']}`", ""]
    for r in results:
        lines += [f"## {r['scenario']} ({r['devices']} device(s)): {'OK' if r.get('ok') else 'FAILED'} "
                  f"({r['seconds']} s)", ""]
        if "error" in r:
            lines += ["```", r["error"], "```", ""]
            continue
        post = r["post_hoc"]
        if post["ranks"]:
            lines += ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
            lines += ["| " + " | ".join(f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in COLUMNS)
                      + " |" for row in post["ranks"]]
            lines += ["", "| rank | kind | calls | total ms | hidden ms | exposed ms | transfer ms |",
                      "| --- | --- | --- | --- | --- | --- | --- |"]
            for k in post["kinds"]:
                hidden = "" if k["hidden_ns"] is None else f"{k['hidden_ns'] / 1e6:.2f}"
                exposed = "" if k["hidden_ns"] is None else f"{(k['total_ns'] - k['hidden_ns']) / 1e6:.2f}"
                lines.append(f"| {k['rank']} | {k['kind']} | {k['calls']} | {k['total_ns'] / 1e6:.2f} | {hidden} | "
                             f"{exposed} | {k['transfer_ns'] / 1e6:.2f} |")
            lines += ["", f"Collective names: {', '.join(f'{n} ({k})' for n, k in post['names'])}. Late starts: "
                      f"{post['late_starts']} matched calls with a wait, {post['matched_by_seq']} of them matched by "
                      f"sequence number. Post hoc stragglers {post['stragglers']}. {post['message'] or ''}"]
        else:
            lines.append("No distributed results (world 1, no collective in the traces).")
        for w in r.get("live", []):
            lines.append(f"- live window: stragglers {w['stragglers']}, missing {w['missing_ranks']}")
        if r.get("problems"):
            lines += ["", "Problems: " + "; ".join(r["problems"])]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default="gpu", choices=["gpu", "cpu"])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--scenarios", default=None, help=f"default: {','.join(TWO_RANKS)} (with --devices 1: "
                                                          f"{','.join(ONE_RANK)})")
    parser.add_argument("--parallel", action="store_true", help="run the scenarios at once (GPU hosts)")
    parser.add_argument("--out", default=str(results_dir(__file__)))
    parser.add_argument("--tag", default=None, help="file name tag (default: h200 on GPU, cpu on CPU)")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--sleep-ms", type=float, default=100.0, help="rank 1's extra sleep per step")
    parser.add_argument("--base-ms", type=float, default=None, help="every rank's sleep per step (default 40 on GPU,"
                                                                    " 60 on CPU: jitter of a shared machine)")
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--port", type=int, default=29631)
    parser.add_argument("--timeout", type=int, default=240, help="seconds per scenario")
    parser.add_argument("--work", default=None, help="where the runs' traces go (default: a temporary directory)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cpu = args.accelerator == "cpu"
    args.width = args.width or (256 if cpu else 4096)
    args.batch = args.batch or (32 if cpu else 256)
    args.base_ms = args.base_ms if args.base_ms is not None else (60.0 if cpu else 40.0)
    if args.worker:
        worker(args)
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _record import code_version, command, machine, machine_line, now

    scenarios = (args.scenarios or ",".join(ONE_RANK if args.devices == 1 else TWO_RANKS)).split(",")
    args.work = args.work or tempfile.mkdtemp(prefix="streamprof-fsdp-")
    os.makedirs(args.out, exist_ok=True)
    jobs = [(s, args.port + 10 * i) for i, s in enumerate(scenarios)]
    if args.parallel:
        with ThreadPoolExecutor(len(jobs)) as pool:
            results = list(pool.map(lambda job: run_scenario(args, *job), jobs))
    else:
        results = [run_scenario(args, *job) for job in jobs]
    for r in results:
        print(f"{r['scenario']}: {'OK' if r.get('ok') else 'FAILED'} in {r['seconds']} s "
              f"{'; '.join(r.get('problems', [])) or r.get('error', '')[-500:]}", flush=True)
    tag = args.tag or ("cpu" if cpu else "h200")
    m = machine()
    desc = machine_line(m)
    if not cpu:
        import torch

        desc = f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}, torch {torch.__version__}; {desc}"
    meta = {"machine": desc, "date": now(), "command": command("distributed_fsdp.py"), "code": code_version()}
    base = os.path.join(args.out, f"distributed_fsdp-{tag}-{time.strftime('%Y%m%d')}")
    with open(base + ".json", "w") as f:
        json.dump({**meta, "results": results}, f, indent=2)
    text = _markdown(results, meta)
    with open(base + ".md", "w") as f:
        f.write(text)
    print(text)
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
