"""What StreamPipeline is doing now, for the profiler and its recommendations (:attr:`StreamPipeline.state`)."""

from __future__ import annotations

from dataclasses import dataclass

from lightning_streamprof.pipeline.way import SERIAL, Way


@dataclass(frozen=True)
class PipelineState:
    """``way``: how the current batch runs; ``deciding``: ``auto`` has not settled on its first choice yet (its
    warm-up, the first step that finds the frozen calls, or its first trials); ``in_trials``: ``auto`` is timing
    ways now (the first trials or a recheck), so ``way`` may change from one block of steps to the next;
    ``graphed``: the staged frozen calls replay a CUDA graph in this fit; ``staged_calls``: frozen calls run
    ahead."""

    mode: str
    way: Way = SERIAL
    deciding: bool = False
    in_trials: bool = False
    graphed: bool = False
    staged_calls: int = 0

    @property
    def pipelined(self) -> bool:
        return self.way.staged

