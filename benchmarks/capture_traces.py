"""Capture small real Kineto traces with StreamProfiler (test fixtures and comparison inputs).

    python benchmarks/capture_traces.py --out tests/fixtures/traces

Scenarios: the frozen-backbone workload plain, with memory/stack/shapes recording, and under bf16 autocast
(Tensor Cores); one window of two steps each, so each trace stays small.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, ROOT)

import lightning as L  # noqa: E402
from workloads import FrozenBackboneSegmenter, SegmentationData  # noqa: E402

from lightning_streamprof import StreamProfiler  # noqa: E402

SCENARIOS = {
    "frozen_backbone": dict(precision="32-true", options={}),
    "frozen_backbone_memory_stack": dict(
        precision="32-true", options=dict(profile_memory=True, with_stack=True, record_shapes=True)
    ),
    "frozen_backbone_bf16": dict(precision="bf16-mixed", options={}),
}


def capture(name: str, out: str, args: argparse.Namespace) -> str:
    spec = SCENARIOS[name]
    tmp = tempfile.mkdtemp(prefix=f"capture-{name}-")
    profiler = StreamProfiler(dirpath=tmp, skip_first=10, warmup=2, active=args.active, every=0, **spec["options"])
    trainer = L.Trainer(
        max_steps=20, accelerator="auto", devices=1, profiler=profiler, default_root_dir=tmp, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
        precision=spec["precision"],
    )
    data = SegmentationData(args.batch_size, args.image_size, args.batch_size * 21, workers=args.workers)
    L.seed_everything(0, verbose=False)
    trainer.fit(FrozenBackboneSegmenter(), datamodule=data)
    (window,) = profiler.windows
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, f"{name}.pt.trace.json.gz")
    shutil.copyfile(window.path, target)
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
        path = capture(name, args.out, args)
        print(f"{name}: {path} ({os.path.getsize(path) / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
