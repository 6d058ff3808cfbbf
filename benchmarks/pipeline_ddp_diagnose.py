"""Where StreamPipeline's time goes under DDP: the staged copy taken apart, piece by piece, against serial.

    python -m benchmarks pipeline-ddp-diagnose --devices 2 --workloads resnet50:16 --steps 400

Runs ``benchmarks/pipeline_runs.py``'s harness with extra configurations that each keep one part of staging:
``readahead`` (the loader read one batch ahead, nothing staged: Lightning transfers as usual), ``copy_mainstream``
(the staged copy on the training stream, no side stream), and ``copy_norecord`` (side stream, no
``record_stream``). ``--profile`` records a window of the named configurations with Python stacks.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pipeline_runs  # noqa: E402
import torch  # noqa: E402

from lightning_streamprof.pipeline import callback  # noqa: E402
from lightning_streamprof.pipeline.stager import StagedBatch  # noqa: E402

COPY = pipeline_runs.CONFIGS["copy"]


class ReadAhead(callback.StreamPipeline):
    """The staging fetcher without staging: batch N+1 is only read from the loader ahead of time."""

    def _stage(self, raw):
        return StagedBatch(raw)

    def _call_batch_hook(self, hook_name, *args):
        return self._orig_batch_hook(hook_name, *args)


class MainStream(callback.StreamPipeline):
    def on_train_start(self, trainer, pl_module):
        super().on_train_start(trainer, pl_module)
        if self._cuda:
            self._stream = torch.cuda.current_stream()


class NoRecord(callback.StreamPipeline):
    def _stage(self, raw):
        staged = super()._stage(raw)
        if staged.ready is not None:
            staged.hand_over = lambda s=staged: (torch.cuda.current_stream().wait_event(s.ready), s.batch)[1]
        return staged


VARIANTS = {"readahead": ReadAhead, "copy_mainstream": MainStream, "copy_norecord": NoRecord}


def main() -> None:
    original = pipeline_runs.StreamPipeline

    def factory(**kwargs):
        variant = kwargs.pop("_variant", None)
        return VARIANTS[variant](**kwargs) if variant else original(**kwargs)

    pipeline_runs.StreamPipeline = factory
    for name in VARIANTS:
        pipeline_runs.CONFIGS[name] = {**COPY, "_variant": name}
    if "--configs" not in sys.argv:
        sys.argv += ["--configs", "serial,copy,copy_nopin,readahead,copy_mainstream,copy_norecord,on_inline,on"]
    pipeline_runs.main()


if __name__ == "__main__":
    main()
