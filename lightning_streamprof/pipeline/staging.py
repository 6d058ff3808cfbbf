"""Staging of one batch on a side CUDA stream, and its hand-over to the training stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from lightning.fabric.utilities.apply_func import apply_to_collection


def tensors_in(obj: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    apply_to_collection(obj, torch.Tensor, found.append)
    return found


def pin(batch: Any) -> Any:
    """Page-locked copies of a batch's CPU tensors (asynchronous host-to-device copies need them)."""
    return apply_to_collection(
        batch, torch.Tensor, lambda t: t.pin_memory() if t.device.type == "cpu" and not t.is_pinned() else t
    )


@dataclass
class StagedBatch:
    """A batch whose copy, augmentation and backbone forward were launched on the side stream.

    ``backbone_input`` is the tensor the backbone was run on and ``backbone_output`` its result; the
    backbone's proxy returns the output when called with exactly that tensor.
    """

    batch: Any
    ready: torch.cuda.Event | None = None
    backbone_input: torch.Tensor | None = None
    backbone_output: Any = None
    extra: list[torch.Tensor] = field(default_factory=list)
    index: tuple = (0, 0)  # (batch_idx, dataloader_idx) as the fetcher returned them

    def hand_over(self) -> Any:
        """Make the current stream wait for the staging work and own the staged memory from now on."""
        if self.ready is not None:
            stream = torch.cuda.current_stream(self.ready.device if hasattr(self.ready, "device") else None)
            stream.wait_event(self.ready)
            for t in tensors_in(self.batch) + tensors_in(self.backbone_output) + self.extra:
                if t.is_cuda:
                    t.record_stream(stream)
        return self.batch
