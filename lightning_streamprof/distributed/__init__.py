"""Live distributed aggregation: per-rank window summaries gathered to rank 0 during training and scored there.

The scoring itself is a pure function of the gathered table (:mod:`lightning_streamprof.analysis.scoring`, which
``streamprof analyze`` uses too); this package is the gathering: :mod:`.exchange` (bounded waits on the process
group's store), :mod:`.gather` (each host's local rank 0, then rank 0), :mod:`.wire` (a table as bytes) and
:mod:`.live` (the profiler's side).
"""

from lightning_streamprof.analysis.scoring import THRESHOLD, score

__all__ = ["THRESHOLD", "score"]
