"""One whole training run for ``profiler_overhead.py``, in a process of its own (so each run pays Kineto's and
CUPTI's set-up as a user's run does): ``python benchmarks/overhead_run.py '<spec JSON>'`` prints one JSON line.

The spec: ``workload`` (``vit``: a frozen timm ViT linear probe on dict batches of uint8 images, normalised in
``training_step``; ``seg``: the seed's frozen-backbone segmentation on a resident pool of uint8 images and int64
label maps through ``workers`` loader processes; ``segdev``: the same model on batches already on the device, no
loader at all — still host-bound on an H200 at batch 32, 33% GPU utilization in its windows), ``batch``,
``precision``, ``image_size``, ``arch`` (timm), ``workers``, ``threads`` (``torch.set_num_threads``, 0: torch's
default), ``steps`` and ``config``:

- ``none``: no profiler;
- ``streamprof``: ``Trainer(profiler="streamprof")``, the default as users turn it on;
- ``streamprof-full``: ``StreamProfiler(with_stack=True, profile_memory=True, record_shapes=True)``;
- ``streamprof-noanalysis``: ``StreamProfiler(analyze=False)`` (the export without the worker's analysis);
- ``streamprof-idle``: ``StreamProfiler(skip_first=10**9)``, the profiler, its threads and its worker in the run but
  no window (what its presence alone does to the steps);
- ``streamprof-late``: the default options with a single window at the middle of the run, whose steps after it
  against those before it (over the same ratio of a run without a profiler) say whether a window slows the steps
  that follow it (``_aftermath.py``);
- ``pytorch``: Lightning's ``PyTorchProfiler()`` with its defaults.

The rate is steps per second from step 10 to the end of training (``on_train_end``, the device synchronised); the
fit rate counts to ``trainer.fit``'s return (the profiler's end of stage included). Per-step times give the steps
between windows against the run's steps in windows and their exports (where the profiler says ``in_window``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "examples"), os.path.join(ROOT, "benchmarks"), ROOT]

import lightning as L  # noqa: E402
from _aftermath import after_before, late_start  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

START = 10  # runs are timed from this step


class ResidentSegmentation(Dataset):
    """``length`` items from a pool of random uint8 images ``3 x S x S`` and int64 label maps (10 classes)."""

    def __init__(self, length: int, size: int, pool: int = 64) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (pool, 3, size, size), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, 10, (pool, size, size), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        j = i % len(self.images)
        return self.images[j], self.labels[j]


class RunClock(L.Callback):
    """Batch-start times, whether the profiler was in a window (or its export) at each, and the end of training."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.watched: list[bool] = []
        self.t0 = self.t_end = None
        self.n0 = self.n_end = 0
        self.worker_cpu_s = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.starts.append(time.perf_counter())
        self.watched.append(bool(getattr(trainer.profiler, "in_window", False)))
        if self.t0 is None and trainer.global_step >= START:
            _sync()
            self.t0, self.n0 = time.perf_counter(), trainer.global_step

    def on_train_end(self, trainer, pl_module) -> None:
        _sync()
        self.t_end, self.n_end = time.perf_counter(), trainer.global_step
        self.worker_cpu_s = _worker_cpu(trainer.profiler)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _worker_cpu(profiler) -> float | None:
    """CPU seconds of StreamProfiler's analysis worker so far (Linux), None without one."""
    worker = getattr(getattr(getattr(profiler, "_profiled", None), "exporter", None), "_worker", None)
    proc = getattr(worker, "_proc", None)
    try:
        fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, IndexError, ValueError):
        return None


def make_profiler(config: str, out: str, steps: int):
    from lightning.pytorch.profilers import PyTorchProfiler

    from lightning_streamprof import StreamProfiler

    if config == "none":
        return None
    if config == "streamprof":
        return "streamprof"
    if config == "streamprof-full":
        return StreamProfiler(with_stack=True, profile_memory=True, record_shapes=True)
    if config == "streamprof-noanalysis":
        return StreamProfiler(analyze=False)
    if config == "streamprof-idle":
        return StreamProfiler(skip_first=10**9)
    if config == "streamprof-late":
        return StreamProfiler(skip_first=late_start(steps), every=0)
    if config == "pytorch":
        return PyTorchProfiler(dirpath=out, filename="pt")
    raise SystemExit(f"overhead_run: unknown config {config!r}")


class DeviceBatches(Dataset):
    """``length`` whole batches (``DataLoader(batch_size=None)``) from a pool of 8 batches of random uint8 images
    ``batch x 3 x S x S`` and int64 label maps, made once on the device."""

    def __init__(self, length: int, batch: int, size: int, pool: int = 8) -> None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        g = torch.Generator(device=device).manual_seed(0)
        self.batches = [(torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=g, device=device),
                         torch.randint(0, 10, (batch, size, size), generator=g, device=device)) for _ in range(pool)]
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        return self.batches[i % len(self.batches)]


def make_workload(spec: dict):
    n = spec["batch"] * (spec["steps"] + 2)
    if spec["workload"] == "segdev":
        from workloads import FrozenBackboneSegmenter

        data = DeviceBatches(spec["steps"] + 2, spec["batch"], spec["image_size"] or 256)
        return FrozenBackboneSegmenter(width=spec.get("width") or 32), DataLoader(data, batch_size=None)
    if spec["workload"] == "vit":
        from workloads import DictImages, TimmLinearProbe

        size = spec["image_size"] or 224
        model = TimmLinearProbe(arch=spec["arch"], img_size=size)
        data = DictImages(n, size)
    elif spec["workload"] == "seg":
        from workloads import FrozenBackboneSegmenter

        model = FrozenBackboneSegmenter(width=spec.get("width") or 32)
        data = ResidentSegmentation(n, spec["image_size"] or 256)
    else:
        raise SystemExit(f"overhead_run: unknown workload {spec['workload']!r}")
    workers = spec["workers"]
    loader = DataLoader(data, batch_size=spec["batch"], shuffle=True, num_workers=workers, drop_last=True,
                        pin_memory=torch.cuda.is_available(), persistent_workers=workers > 0)
    return model, loader


def run(spec: dict) -> dict:
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    L.seed_everything(0, verbose=False)
    out = tempfile.mkdtemp(prefix=f"overhead-{spec['config']}-")
    model, loader = make_workload(spec)
    clock = RunClock()
    trainer = L.Trainer(max_steps=spec["steps"], accelerator="auto", devices=1, precision=spec["precision"],
                        profiler=make_profiler(spec["config"], out, spec["steps"]), callbacks=[clock],
                        default_root_dir=out, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, max_epochs=-1)
    trainer.fit(model, loader)
    t_fit = time.perf_counter()
    steps = clock.n_end - clock.n0
    row = {"rate": steps / (clock.t_end - clock.t0), "fit_rate": steps / (t_fit - clock.t0), "steps": steps,
           "end_of_fit_s": t_fit - clock.t_end}
    row.update(_step_stats(clock, spec["steps"]))
    profiler = trainer.profiler
    cost = getattr(profiler, "cost", None)
    if cost is not None:
        row.update(stated_fraction=cost.fraction, stated_s=cost.seconds, training_s=cost.training_seconds,
                   windows=cost.windows, end_stage_s=cost.end_seconds, worker_cpu_s=clock.worker_cpu_s,
                   first_window_s=cost.first_window_seconds, first_window_parts_s=cost.first_window_parts,
                   first_window_calls_s=getattr(getattr(getattr(profiler, "_profiled", None), "recorder", None),
                                                "first_window_calls", None),
                   headline=profiler.summary().splitlines()[0],
                   gpu_utilization=_mean_metric(profiler, "streamprof/gpu_utilization"))
    row["trace_files"] = sum(f.endswith((".pt.trace.json", ".pt.trace.json.gz")) for _, _, fs in os.walk(out)
                             for f in fs)
    shutil.rmtree(out, ignore_errors=True)
    return row


def _step_stats(clock: RunClock, steps: int) -> dict:
    """Median step time (ms) of the timed steps between windows and the seconds the windowed steps took over it."""
    every = [b - a for a, b in zip(clock.starts, clock.starts[1:])]
    durations = every[START:]
    watched = clock.watched[START:len(durations) + START]
    between = [d for d, w in zip(durations, watched) if not w]
    if not between:
        return {}
    median = statistics.median(between)
    return {"between_windows_step_ms": 1e3 * median, "watched_steps": sum(watched),
            "watched_excess_s": sum(d - median for d, w in zip(durations, watched) if w),
            "after_before": after_before(every, steps, 2 * START, clock.watched)}


def _mean_metric(profiler, key: str) -> float | None:
    values = [w.metrics[key] for w in profiler.windows if w.metrics and key in w.metrics]
    return statistics.fmean(values) if values else None


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)
