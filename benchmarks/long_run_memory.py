"""A long CPU run with a profiling window every ``--every`` steps: the training process's memory (RSS), how far the
exports are behind training, and the length of the end-of-stage summary.

Samples the RSS (after ``gc.collect`` and ``malloc_trim``) at every window start; reports the growth from the
sample after ``--settle`` windows to the end, with and without the profiler (``--baseline``). Writes
``long_run_memory-cpu-<date>.json`` and ``.md`` to ``--out``; with ``--print`` only prints the JSON (the test
suite runs a short version this way).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import gc
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import lightning as L  # noqa: E402
from _record import code_version, command, machine, machine_line, now  # noqa: E402
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from lightning_streamprof import StreamProfiler  # noqa: E402
from suites import results_dir  # noqa: E402


def rss_bytes() -> int:
    """Resident memory of this process after a collection and returning free heap pages to the system."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Model(BoringModel):
    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 4096), batch_size=2)


class Sampler(L.Callback):
    """At each window start: RSS, windows ended and windows written so far."""

    def __init__(self, every: int, skip: int) -> None:
        self.every, self.skip, self.samples = every, skip, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if step < self.skip or (step - self.skip) % self.every:
            return
        prof = trainer.profiler
        stage = getattr(prof, "_profiled", None)  # noqa: SLF001
        exporter = getattr(stage, "exporter", None)
        recorder = getattr(stage, "recorder", None)
        self.samples.append({
            "step": step, "rss": rss_bytes(),
            "ended": recorder._windows_done if recorder is not None else 0,  # noqa: SLF001
            "written": exporter.written if exporter is not None else 0,
        })


def run(steps: int, every: int, profiled: bool, directory: str) -> dict:
    skip = 20
    prof = StreamProfiler(dirpath=directory, skip_first=skip, warmup=1, active=3, every=every,
                          max_overhead=None) if profiled else None
    sampler = Sampler(every, skip)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, profiler=prof, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, callbacks=[sampler], default_root_dir=directory)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Model())
    seconds = time.perf_counter() - start
    out = {"profiled": profiled, "steps": trainer.global_step, "seconds": round(seconds, 1),
           "samples": sampler.samples, "rss_end": rss_bytes()}
    if prof is not None:
        summary = prof.summary()
        out.update(windows_written=prof._profiled.exporter.written, summary_lines=len(summary.splitlines()),  # noqa: SLF001
                   summary_bytes=len(summary.encode()), windows_kept=len(prof.windows),
                   analyses_kept=sum(w.analysis is not None for w in prof.windows),
                   max_export_lag=max((s["ended"] - s["written"] for s in sampler.samples), default=0))
    return out


def growth(result: dict, settle: int) -> dict:
    """RSS growth from the sample after ``settle`` windows to the end."""
    samples = result["samples"]
    base = samples[min(settle, len(samples) - 1)]
    return {"from_step": base["step"], "rss_from": base["rss"], "rss_end": result["rss_end"],
            "growth_bytes": result["rss_end"] - base["rss"],
            "max_over_base_bytes": max(s["rss"] for s in samples[settle:] + [{"rss": result["rss_end"]}]) - base["rss"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--settle", type=int, default=10, help="windows before the reference sample")
    parser.add_argument("--baseline", action="store_true", help="also run without the profiler")
    parser.add_argument("--print", action="store_true", help="print the JSON only, write no file")
    parser.add_argument("--out", type=Path, default=results_dir(__file__))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        runs = [run(args.steps, args.every, True, directory)]
        if args.baseline:
            runs.append(run(args.steps, args.every, False, directory))
    for r in runs:
        r["growth"] = growth(r, args.settle)
    report = {"benchmark": "long_run_memory", "date": now(), "machine": machine(),
              "command": command("long_run_memory.py"), "code": code_version(), "every": args.every,
              "settle_windows": args.settle, "runs": runs}
    if args.print:
        print(json.dumps(report))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"long_run_memory-cpu-{dt.date.today():%Y%m%d}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    stem.with_suffix(".md").write_text(_markdown(report))
    print(_markdown(report))
    return 0


def _markdown(r: dict) -> str:
    lines = [f"# long_run_memory ({r['date']})", "", f"- machine: {machine_line(r['machine'])}",
             f"- command: `{r['command']}`", f"- code measured: {r['code']}", "",
             "| run | steps | windows written | RSS at the reference window | RSS at the end | growth | max over reference "
             "| max export lag (windows) | summary lines | time |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run_ in r["runs"]:
        g = run_["growth"]
        lines.append(
            f"| {'streamprof' if run_['profiled'] else 'no profiler'} | {run_['steps']:,} "
            f"| {run_.get('windows_written', '-')} | {g['rss_from'] / 2**20:.1f} MiB (step {g['from_step']:,}) "
            f"| {g['rss_end'] / 2**20:.1f} MiB | {g['growth_bytes'] / 2**20:+.2f} MiB "
            f"| {g['max_over_base_bytes'] / 2**20:+.2f} MiB | {run_.get('max_export_lag', '-')} "
            f"| {run_.get('summary_lines', '-')} | {run_['seconds']:,.0f} s |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
