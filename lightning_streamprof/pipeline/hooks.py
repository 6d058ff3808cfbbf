"""Lightning's batch hooks while the pipeline trains: the LightningModule's batch-hook dispatch is routed through
:class:`BatchHooks`, so that a batch the pipeline staged does not run its transfer hooks a second time, ``augment``
follows ``on_after_batch_transfer`` in training, and hooks called on the staging thread bypass Lightning's
dispatch (which sets ``_current_fx_name`` on the module the training thread is using)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from lightning.pytorch import LightningModule, Trainer

from lightning_streamprof.names import pl_range
from lightning_streamprof.pipeline import lightning_api as api
from lightning_streamprof.pipeline import pytree
from lightning_streamprof.pipeline.thread import on_staging_thread

_TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def default_batch_input(batch: Any) -> torch.Tensor:
    """The first tensor of a batch: the tensor itself, ``batch[0]`` or the first tensor value of a dict."""
    leaves = pytree.leaves_with_paths(batch)
    if leaves and len(leaves[0][0]) <= 1:
        return leaves[0][1]
    raise ValueError("StreamPipeline: cannot tell which tensor of the batch `augment` takes")


def _replace_input(batch: Any, old: torch.Tensor, new: torch.Tensor) -> Any:
    if batch is old:
        return new
    if isinstance(batch, tuple):
        items = tuple(new if b is old else b for b in batch)
        return type(batch)(*items) if hasattr(batch, "_fields") else items
    if isinstance(batch, list):
        return [new if b is old else b for b in batch]
    if isinstance(batch, dict):
        return type(batch)({k: (new if v is old else v) for k, v in batch.items()})
    raise ValueError("StreamPipeline: `augment` needs a batch that is a tensor, a sequence or a mapping")


class BatchHooks:
    """Replaces ``pl_module``'s batch-hook dispatch until :meth:`restore`. ``delivered`` is the batch the
    fetcher last handed over staged (its transfer hooks already ran); ``augment`` (or ``None``) is applied to the
    batch's input tensor after ``on_after_batch_transfer`` while the trainer trains."""

    def __init__(self, trainer: Trainer, pl_module: LightningModule,
                 augment: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        self._trainer, self._module, self._augment = trainer, pl_module, augment
        self.delivered: Any = None
        self._dispatch = api.replace_batch_hook(pl_module, self._route)

    def restore(self) -> None:
        api.restore_batch_hook(self._module)

    def before_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """``on_before_batch_transfer``, as staging calls it."""
        return self.call("on_before_batch_transfer", batch, dataloader_idx)

    def call(self, hook_name: str, *args: Any) -> Any:
        """Lightning's hook call; on the staging thread the hook is called directly, in a profiler range of the
        name Lightning's dispatch gives it."""
        if not on_staging_thread():
            return self._dispatch(hook_name, *args)
        owner = api.hook_owner(self._trainer, hook_name)
        kind = "LightningModule" if isinstance(owner, LightningModule) else "LightningDataModule"
        with torch.autograd.profiler.record_function(pl_range(f"[{kind}]{type(owner).__name__}.{hook_name}")):
            return getattr(owner, hook_name)(*args)

    def _route(self, hook_name: str, *args: Any) -> Any:
        if args and args[0] is self.delivered and hook_name in _TRANSFER_HOOKS:
            return args[0]  # already transferred and augmented while the previous batch trained
        out = self.call(hook_name, *args)
        if hook_name == "on_after_batch_transfer" and self._augment is not None and self._trainer.training:
            x = default_batch_input(out)
            out = _replace_input(out, x, self._augment(x))
        return out
