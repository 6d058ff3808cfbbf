"""Distributed aggregation: per-rank window summaries gathered to rank 0 during training, and the straggler
scoring (a pure function of the gathered table).

:mod:`.scoring` and :mod:`.explain` need neither torch nor Lightning (``streamprof analyze`` uses them);
:mod:`.state` (the torchmetrics declaration of what each rank contributes), :mod:`.exchange` (the bounded
gather through the process group's store) and :mod:`.live` (the profiler's side) import torch.
"""

from lightning_streamprof.distributed.scoring import THRESHOLD, score

__all__ = ["THRESHOLD", "score"]
