"""Capture small real Kineto traces with StreamProfiler (test fixtures and comparison inputs).

    python -m benchmarks capture-traces --out tests/fixtures/traces

Scenarios: the frozen-backbone workload plain, with memory/stack/shapes recording, and under bf16 autocast
(Tensor Cores); one window of two steps each, so each trace stays small. Two more record the GPU-augmentation
workload (augmentation in ``on_after_batch_transfer``, ``examples/gpu_augmentation.py``) for three steps, once
with Lightning's own ``PyTorchProfiler`` (``lightning_pytorchprofiler_augment``) and once with StreamProfiler
(``streamprof_augment``): traces with Lightning's ``[pl][profile]`` ranges for ``compare_tb_profiler.py``.
``streamprof_frozen_graph`` (written under ``h200/``, where the fixture from one H200 lies) records five steps
(22-26) of the frozen backbone with ``StreamPipeline(mode="on", cuda_graph=True)``: the encoder replayed as a CUDA
graph on the staging thread's side stream, for the GPU time per Lightning hook.

    python -m benchmarks capture-traces --scenarios streamprof_frozen_graph

    python -m benchmarks capture-traces --scenarios lightning_pytorchprofiler_augment,streamprof_augment \
        --batch-size 32 --image-size 256
"""

from __future__ import annotations

import argparse
import glob
import gzip
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, ROOT)

import lightning as L  # noqa: E402
import torch  # noqa: E402
from gpu_augmentation import Classifier, RandomImages  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from workloads import FrozenBackboneSegmenter, SegmentationData  # noqa: E402

from lightning_streamprof import StreamPipeline, StreamProfiler  # noqa: E402

#: each frozen-backbone scenario: precision, profiler options, and optionally its schedule (over the default's),
#: the StreamPipeline it trains with, and the folder under ``--out`` it is written to
SCENARIOS = {
    "frozen_backbone": dict(precision="32-true", options={}),
    "frozen_backbone_memory_stack": dict(
        precision="32-true", options=dict(profile_memory=True, with_stack=True, record_shapes=True)
    ),
    "frozen_backbone_bf16": dict(precision="bf16-mixed", options={}),
    "streamprof_frozen_graph": dict(precision="32-true", options=dict(max_overhead=None),
                                    schedule=dict(skip_first=20, active=5),
                                    pipeline=dict(mode="on", cuda_graph=True), folder="h200"),
}


def capture(name: str, out: str, args: argparse.Namespace) -> str:
    spec = SCENARIOS[name]
    tmp = tempfile.mkdtemp(prefix=f"capture-{name}-")
    schedule = {"skip_first": 10, "warmup": 2, "active": args.active, **spec.get("schedule", {})}
    steps = max(20, sum(schedule.values()) + 3)
    profiler = StreamProfiler(dirpath=tmp, every=0, **schedule, **spec["options"])
    callbacks = [StreamPipeline(**spec["pipeline"])] if "pipeline" in spec else []
    trainer = L.Trainer(
        max_steps=steps, accelerator="auto", devices=1, profiler=profiler, default_root_dir=tmp, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
        precision=spec["precision"], callbacks=callbacks,
    )
    data = SegmentationData(args.batch_size, args.image_size, args.batch_size * (steps + 1), workers=args.workers)
    L.seed_everything(0, verbose=False)
    trainer.fit(FrozenBackboneSegmenter(), datamodule=data)
    (window,) = profiler.windows
    out = os.path.join(out, spec.get("folder", ""))
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, f"{name}.pt.trace.json.gz")
    shutil.copyfile(window.path, target)
    shutil.rmtree(tmp, ignore_errors=True)
    return target


AUGMENT_SCENARIOS = ("lightning_pytorchprofiler_augment", "streamprof_augment")


def capture_augment(name: str, out: str, args: argparse.Namespace) -> str:
    """Three recorded steps of the GPU-augmentation workload, by Lightning's PyTorchProfiler or StreamProfiler."""
    tmp = tempfile.mkdtemp(prefix=f"capture-{name}-")
    if name == "streamprof_augment":
        profiler = StreamProfiler(dirpath=tmp, skip_first=10, warmup=2, active=3, every=0)
    else:
        from lightning.pytorch.profilers import PyTorchProfiler

        profiler = PyTorchProfiler(dirpath=tmp, filename="augment", export_to_chrome=True,
                                   schedule=torch.profiler.schedule(skip_first=10, wait=0, warmup=2, active=3, repeat=1))
    trainer = L.Trainer(
        max_steps=20, accelerator="auto", devices=1, profiler=profiler, default_root_dir=tmp, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )
    loader = DataLoader(RandomImages(args.batch_size * 21, args.image_size), batch_size=args.batch_size,
                        num_workers=args.workers, pin_memory=torch.cuda.is_available())
    L.seed_everything(0, verbose=False)
    trainer.fit(Classifier(args.image_size), loader)
    (trace,) = [p for p in glob.glob(os.path.join(tmp, "**", "*.pt.trace.json*"), recursive=True)]
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, f"{name}.pt.trace.json.gz")
    with open(trace, "rb") as f:
        data = f.read()
    with open(target, "wb") as f:
        f.write(data if data[:2] == b"\x1f\x8b" else gzip.compress(data, mtime=0))
    shutil.rmtree(tmp, ignore_errors=True)
    return target


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "traces"))
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--active", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args()
    for name in args.scenarios.split(","):
        path = (capture_augment if name in AUGMENT_SCENARIOS else capture)(name, args.out, args)
        print(f"{name}: {path} ({os.path.getsize(path) / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
