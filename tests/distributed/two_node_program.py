"""One node of a 2-node x 2-process Lightning DDP fit (gloo, CPU) on this machine, as on a cluster: each node
writes its ranks' traces to a directory of its own (its "disk"), the live gather goes through each node's local
rank 0. Every rank sleeps BASE_MS per step, global rank 3 EXTRA_MS more (the straggler, on node 1).

NODE_RANK=<0|1> MASTER_ADDR=127.0.0.1 MASTER_PORT=<port> two_node_program.py OUTDIR BASE_MS EXTRA_MS
(global rank 0 writes OUTDIR/distributed.json: the live results)
"""

import json
import os
import sys
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_streamprof import StreamProfiler
from lightning_streamprof.results import to_builtins


class Work(L.LightningModule):
    def __init__(self, base_ms: float, extra_ms: float) -> None:
        super().__init__()
        self.base_ms, self.extra_ms = base_ms, extra_ms
        self.layer = torch.nn.Linear(32, 32)

    def training_step(self, batch, batch_idx):
        time.sleep((self.base_ms + (self.extra_ms if self.global_rank == 3 else 0)) / 1000)
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(512, 32)), batch_size=16)


if __name__ == "__main__":
    out, base_ms, extra_ms = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    torch.set_num_threads(1)
    node = int(os.environ["NODE_RANK"])
    profiler = StreamProfiler(dirpath=os.path.join(out, f"node{node}"), skip_first=4, warmup=1, active=5, every=10,
                              max_overhead=None, gather_timeout=60)
    trainer = L.Trainer(max_steps=16, accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", profiler=profiler,
                        logger=False, limit_val_batches=0, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=os.path.join(out, f"root{node}"))
    trainer.fit(Work(base_ms, extra_ms))
    if trainer.global_rank == 0:
        with open(os.path.join(out, "distributed.json"), "w") as f:
            json.dump([to_builtins(d) for d in profiler.distributed], f)
    print(f"rank {trainer.global_rank} done, {len(profiler.windows)} windows", flush=True)
