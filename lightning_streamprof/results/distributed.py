"""Results of the distributed aggregation: per-rank summaries (what each rank contributes) and the scores.

A :class:`RankWindow` is one rank's profiling window reduced to what the cross-rank analysis needs (a few KB:
per-step times and one row per collective call); it is the row each rank sends to rank 0 during training and
what a trace's own result carries. :class:`DistributedStats` is computed from a table of them by
:func:`lightning_streamprof.analysis.scoring.score` (definitions in the module docs there), through a columnar
:class:`~lightning_streamprof.analysis.rank_table.RankTable` of them.

Times are integer nanoseconds unless named ``_ms`` (milliseconds per step, float).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec


class _Struct(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """Immutable, keyword-built, encoded with every field (as every result struct)."""


class CollectiveCalls(_Struct):
    """The collective calls of one rank's window, column by column (entry ``i`` of each list is call ``i``).

    ``name``/``group`` index ``names``/``groups``; ``seq`` is the process group's sequence number (-1 when the
    trace has none: gloo); ``step`` indexes the window's steps (-1 outside them); ``occurrence`` counts calls of
    the same group and name within the step (the matching key when ``seq`` is unknown); ``bytes`` is -1 when
    unknown. ``start_ns``/``dur_ns`` time the collective where it runs (the NCCL kernel, gloo's work range);
    ``hidden_ns`` is the part of it that overlaps computation (empty: not measured).
    """

    names: list[str] = []
    groups: list[str] = []
    name: list[int] = []
    group: list[int] = []
    seq: list[int] = []
    step: list[int] = []
    occurrence: list[int] = []
    start_ns: list[int] = []
    dur_ns: list[int] = []
    bytes: list[int] = []
    hidden_ns: list[int] = []

    def __len__(self) -> int:
        return len(self.name)


class RankWindow(_Struct):
    """One rank's window: the row it contributes to the gathered table.

    Per step (lists in step order): ``step_numbers`` (``N`` of ``ProfilerStep#N``, -1 unknown), spans, merged
    computation (``comp_ns``: kernels other than collectives; CPU operators of the training thread in traces
    without kernels), merged communication (``comm_ns``: the collective calls), their ``overlap_ns`` and
    ``dataloader_ns`` (the step breakdown's).
    """

    rank: int
    world_size: int | None = None
    host: str | None = None
    window: int | None = None
    first_step: int | None = None
    step_numbers: list[int] = []
    step_start_ns: list[int] = []
    step_end_ns: list[int] = []
    comp_ns: list[int] = []
    comm_ns: list[int] = []
    overlap_ns: list[int] = []
    dataloader_ns: list[int] = []
    collectives: CollectiveCalls = CollectiveCalls()
    trimmed: bool = False


class RankStats(_Struct):
    """One rank (of one window, or of every window when ``window`` is None): mean milliseconds per step.

    ``computation_ms + overlap_ms + communication_ms + other_ms == step_ms`` (DESIGN §5's bars);
    ``sync_ms`` is the time spent waiting in collectives for other ranks, ``transfer_ms`` the rest of the
    collectives' time; ``own_ms = step_ms - sync_ms``, whose median over the steps (``median_own_ms``) the
    scores compare. ``compute_ms`` (computation including the overlapped part), ``dataloader_ms`` and
    ``host_ms`` (the rest of ``own_ms`` after compute, dataloader and transfer) say where a rank's time goes.
    """

    rank: int
    host: str | None
    window: int | None
    steps: int
    step_ms: float
    computation_ms: float
    overlap_ms: float
    communication_ms: float
    other_ms: float
    sync_ms: float
    transfer_ms: float
    dataloader_ms: float
    compute_ms: float
    host_ms: float
    own_ms: float
    median_own_ms: float
    relative_score: float
    individual_score: float | None
    straggler: bool


class CommOpStats(_Struct):
    """One collective name on one rank: calls, message bytes (None when unknown), latency (the call's time on
    this rank) and transfer time (the shortest time of the same call over the ranks).

    ``kind`` is the collective's family whatever its spelling (``all_gather``, ``reduce_scatter``,
    ``all_reduce``...: :func:`lightning_streamprof.analysis.collective_kinds.kind`); ``hidden_ns`` is the part of
    ``total_ns`` that overlaps computation and ``exposed_ns`` the rest (None when the trace's window did not
    measure it).
    """

    rank: int
    name: str
    calls: int
    total_bytes: int | None
    mean_bytes: float | None
    total_ns: int
    mean_ns: float
    transfer_ns: int
    mean_transfer_ns: float
    kind: str = "other"
    hidden_ns: int | None = None
    exposed_ns: int | None = None


class LateStart(_Struct):
    """One collective call matched over ``ranks`` ranks: the rank that arrived last (``late_rank``, the one
    whose call was shortest: everyone else waited for it) and how long the others waited (ns)."""

    window: int | None
    step: int | None
    group: str
    seq: int | None
    name: str
    ranks: int
    late_rank: int
    max_wait_ns: int
    mean_wait_ns: float


class WaitedFor(_Struct):
    """How often the other ranks waited for ``rank`` (it arrived last at ``collectives`` matched calls with a
    wait) and for how long in total (the longest wait of each such call, summed, ns)."""

    rank: int
    collectives: int
    wait_ns: int


class DistributedWindow(_Struct):
    """One window: each rank's numbers and scores; ``missing_ranks`` did not contribute (no trace, or no
    answer in time during training)."""

    window: int | None
    first_step: int | None
    ranks: list[RankStats]
    stragglers: list[int]
    missing_ranks: list[int]
    message: str | None


class DistributedStats(_Struct):
    """The distributed aggregation of a run (or of one window).

    ``ranks`` are over every window; ``stragglers`` are the ranks whose relative score is below
    ``threshold``; ``message`` names the straggler, its lag and where its extra time goes (None without one).
    ``summaries`` are the per-rank inputs the rest is computed from (kept in a single trace's result, so that
    results of several traces combine exactly; empty in a combined result).
    """

    threshold: float
    world_size: int | None
    ranks: list[RankStats]
    stragglers: list[int]
    message: str | None
    comm_ops: list[CommOpStats]
    late_starts: list[LateStart]
    waited_for: list[WaitedFor]
    windows: list[DistributedWindow]
    missing_ranks: list[int] = []
    summaries: list[RankWindow] = []


def rank_ranges(ranks: Iterable[int]) -> str:
    """``0-7, 12, 40-41``: ranks as runs (a silent host of 8 ranks is one item, not eight)."""
    out: list[str] = []
    ranks = sorted(set(ranks))
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(out)
