"""A 2-process DDP (gloo) fit with StreamProfiler, run by test_distributed.py: ddp_program.py OUTDIR"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lightning as L  # noqa: E402
from helpers import TinyModel  # noqa: E402

from lightning_streamprof import StreamProfiler  # noqa: E402

if __name__ == "__main__":
    out = sys.argv[1]
    profiler = StreamProfiler(dirpath=out, skip_first=3, warmup=1, active=2, every=8, max_overhead=None)
    trainer = L.Trainer(
        max_steps=20,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        profiler=profiler,
        default_root_dir=out,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
    )
    trainer.fit(TinyModel())
    print(f"rank {trainer.global_rank} windows {len(profiler.windows)} steps {trainer.global_step}")
