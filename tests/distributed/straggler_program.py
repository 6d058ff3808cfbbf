"""A 2-process DDP fit with StreamProfiler: every rank sleeps BASE_MS in each training step (work that CPU
contention from other processes cannot slow down), rank 1 EXTRA_MS more (the injected straggler).

straggler_program.py OUTDIR BASE_MS EXTRA_MS [ACCELERATOR]   (rank 0 writes OUTDIR/distributed.json: the live
results)
"""

import os
import sys
import time

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from lightning_streamprof import StreamProfiler
from lightning_streamprof.results import to_builtins


class Work(L.LightningModule):
    """A few matrix products per step (a few ms), a sleep on every rank and an extra one on rank 1."""

    def __init__(self, base_ms: float, extra_ms: float) -> None:
        super().__init__()
        self.base_ms, self.extra_ms = base_ms, extra_ms
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(2)])

    def training_step(self, batch, batch_idx):
        time.sleep((self.base_ms + (self.extra_ms if self.global_rank == 1 else 0)) / 1000)
        return self.layers(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(512, 64)), batch_size=64)


if __name__ == "__main__":
    out, base_ms, extra_ms = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    accelerator = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    torch.set_num_threads(1)
    profiler = StreamProfiler(dirpath=os.path.join(out, "traces"), skip_first=4, warmup=1, active=6, every=12,
                              max_overhead=None, gather_timeout=60)
    trainer = L.Trainer(
        max_steps=28, accelerator=accelerator, devices=2, strategy="ddp", profiler=profiler, default_root_dir=out,
        logger=CSVLogger(out, name="logs"), limit_val_batches=0, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(Work(base_ms, extra_ms))
    if trainer.global_rank == 0:
        import json

        with open(os.path.join(out, "distributed.json"), "w") as f:
            json.dump([to_builtins(d) for d in profiler.distributed], f)
    print(f"rank {trainer.global_rank} done, {len(profiler.windows)} windows")
