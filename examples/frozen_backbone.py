"""Train the frozen-backbone segmentation example with StreamProfiler and StreamPipeline; the profiler's summary
ends with the HTML report's path, what StreamPipeline did and the commands to run next.

    python examples/frozen_backbone.py                      # small run, CPU when there is no GPU
    python examples/frozen_backbone.py --image-size 256 --batch-size 8 --steps 2000 --workers 8

The same workload from a YAML config (LightningCLI): ``python examples/train.py fit --config
examples/configs/frozen_backbone.yaml``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lightning as L  # noqa: E402
import torch  # noqa: E402
from quiet import quiet_lightning  # noqa: E402
from workloads import FrozenBackboneSegmenter, SegmentationData  # noqa: E402

from lightning_streamprof import StreamPipeline, StreamProfiler  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--every", type=int, default=40, help="steps between profiling windows (0: one window)")
    p.add_argument("--root", default="streamprof_runs/frozen_backbone")
    p.add_argument(
        "--pipeline",
        default="auto" if torch.cuda.is_available() else "on",
        choices=["auto", "on", "off"],
        help="StreamPipeline mode (default: auto on a GPU; on without one, where auto would stay serial)",
    )
    args = p.parse_args(argv)

    quiet_lightning()
    L.seed_everything(0, verbose=False)
    profiler = StreamProfiler(skip_first=10, warmup=1, active=3, every=args.every, max_overhead=None)
    pipeline = StreamPipeline(backbone="encoder", mode=args.pipeline)
    trainer = L.Trainer(
        callbacks=[pipeline],
        max_epochs=1,  # the data set holds exactly `steps` batches
        accelerator="auto",
        devices=1,
        profiler=profiler,
        default_root_dir=args.root,
        limit_val_batches=2,
        val_check_interval=min(50, args.steps),
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    data = SegmentationData(args.batch_size, args.image_size, train_size=args.batch_size * args.steps,
                            workers=args.workers)
    trainer.fit(FrozenBackboneSegmenter(), datamodule=data)  # the profiler's summary is printed at its end


if __name__ == "__main__":
    main()
