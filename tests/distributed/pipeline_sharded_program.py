"""StreamPipeline under FSDP (``fsdp``) or FSDP2 (``fsdp2``), 2 processes: a frozen encoder that is itself sharded,
and a trainable head. Writes each rank's loss per step and a checksum of the head's weights to OUTDIR/rank<R>.json.

pipeline_sharded_program.py OUTDIR STRATEGY PIPELINE [ACCELERATOR] [STAGING]
    STRATEGY: fsdp | fsdp2; PIPELINE: on | off; ACCELERATOR: cpu (default) | gpu; STAGING: default | thread | inline
"""

import json
import os
import sys
import warnings

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_streamprof import StreamPipeline

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from program_exit import leave_after_distributed_run  # noqa: E402

WIDTH, STEPS = 64, 12


class Frozen(L.LightningModule):
    def __init__(self, kind: str, cpu: bool) -> None:
        super().__init__()
        self.kind, self.cpu = kind, cpu
        torch.manual_seed(0)
        self.encoder = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH))
        self.encoder.requires_grad_(False).eval()
        self.head = torch.nn.Linear(WIDTH, 4)
        self.losses = []

    def configure_model(self) -> None:
        if self.kind == "fsdp2":
            from torch.distributed.fsdp import fully_shard

            mesh = self.device_mesh["data_parallel"]
            fully_shard(self.encoder, mesh=mesh)  # the frozen module is sharded: its forward all-gathers
            fully_shard(self.head, mesh=mesh)
        elif self.cpu and not isinstance(self.encoder, torch.distributed.fsdp.FullyShardedDataParallel):
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            self.encoder = FSDP(self.encoder, device_id=torch.device("cpu"))
            self.head = FSDP(self.head, device_id=torch.device("cpu"))

    def training_step(self, batch, batch_idx):
        x, y = batch
        features = self.encoder(x.float())
        loss = torch.nn.functional.cross_entropy(self.head(features), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(1)
        data = TensorDataset(torch.randn(STEPS * 16, WIDTH, generator=g), torch.randint(0, 4, (STEPS * 16,), generator=g))
        return DataLoader(data, batch_size=8)


if __name__ == "__main__":
    out, kind, pipeline = sys.argv[1], sys.argv[2], sys.argv[3]
    accelerator = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    staging = {"default": None, "thread": True, "inline": False}[sys.argv[5] if len(sys.argv) > 5 else "default"]
    cpu = accelerator == "cpu"
    torch.set_num_threads(1)
    if kind == "fsdp2":
        from lightning.pytorch.strategies import ModelParallelStrategy

        strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    else:
        from lightning.pytorch.strategies import FSDPStrategy

        class CPUFSDPStrategy(FSDPStrategy):
            """Lightning refuses ``FSDPStrategy`` itself on CPU, not a subclass."""

        strategy = CPUFSDPStrategy() if cpu else FSDPStrategy(auto_wrap_policy={torch.nn.Linear})
    callbacks = [StreamPipeline(backbone="encoder", mode="on", staging_thread=staging)] if pipeline == "on" else []
    model = Frozen(kind, cpu)
    trainer = L.Trainer(max_steps=STEPS, accelerator=accelerator, devices=2, strategy=strategy, callbacks=callbacks,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, default_root_dir=out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model)
    head = model.head.module if hasattr(model.head, "module") else model.head
    with torch.no_grad():
        total = sum(float(p.full_tensor().sum() if hasattr(p, "full_tensor") else p.sum()) for p in head.parameters())
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump({"losses": model.losses, "head_sum": total,
                   "report": callbacks[0].report() if callbacks else None,
                   "warnings": [str(w.message) for w in caught if "StreamPipeline" in str(w.message)]}, f)
    print(f"rank {trainer.global_rank} done", flush=True)
    leave_after_distributed_run()
