"""Small Lightning programs shared by the tests."""

import time

import lightning as L
import torch
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader


class TinyModel(BoringModel):
    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 64), batch_size=2)

    def val_dataloader(self):
        return DataLoader(RandomDataset(32, 8), batch_size=2)


class Paced(L.Callback):
    """Each training step lasts ``seconds`` longer: windows a few steps apart then meet an export that is done, as
    in real training, rather than one still running (which skips the window, as it should) on a loaded machine."""

    def __init__(self, seconds: float = 0.01) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args) -> None:
        time.sleep(self.seconds)


def fit(profiler, tmp_path, max_steps=30, accelerator="cpu", model=None, **trainer_kwargs):
    trainer_kwargs.setdefault("limit_val_batches", 0)
    trainer_kwargs.setdefault("logger", False)
    trainer_kwargs.setdefault("enable_checkpointing", False)
    trainer = L.Trainer(
        max_steps=max_steps,
        accelerator=accelerator,
        devices=1,
        profiler=profiler,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,

        **trainer_kwargs,
    )
    trainer.fit(model if model is not None else TinyModel())
    return trainer


def cpu_op_names_between(trace, start_us, end_us):
    return [
        e["name"]
        for e in trace["traceEvents"]
        if e.get("cat") == "user_annotation" and start_us <= e["ts"] < end_us and "validation" in e["name"]
    ]


def bench_out(tmp_path) -> str:
    """Where a GPU test's benchmark writes its result files: ``$STREAMPROF_BENCH_OUT``, else ``tmp_path``."""
    import os

    out = os.environ.get("STREAMPROF_BENCH_OUT") or str(tmp_path)
    os.makedirs(out, exist_ok=True)
    return out
