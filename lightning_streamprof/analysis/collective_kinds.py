"""What kind of collective a name is (all-gather, reduce-scatter, all-reduce...), whatever its spelling, and which
collective a gloo work range runs.

PyTorch spells one collective many ways: ``all_gather_into_tensor``, ``_allgather_base``,
``allgather_into_tensor_coalesced`` (``Collective name``), ``c10d::_allgather_base_`` (the operator),
``ncclDevKernel_AllGather_RING_LL`` (the kernel: ``AllGather``), ``gloo:all_gather`` (gloo's work range).
:func:`kind` maps each to one family. Gloo runs a reduce-scatter (``_reduce_scatter_base``, which FSDP issues)
as an all-reduce: its work range says ``gloo:all_reduce``; :func:`issued_kinds` finds, for each gloo range, the
``c10d::`` operator that issued it (gloo runs a process group's work in the order it was issued), so that the
call is named for what the program asked.
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: families in the order they are tested (``reduce_scatter`` before ``reduce`` and ``scatter``...)
_FAMILIES = (
    ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"), ("allreduce", "all_reduce"),
    ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("sendrecv", "send_recv"), ("send", "send_recv"),
    ("recv", "send_recv"), ("barrier", "barrier"), ("reduce", "reduce"), ("gather", "gather"), ("scatter", "scatter"),
)
#: the kinds a gloo work range of a kind may run: gloo runs reduce-scatters as all-reduces
_RUNS_AS = {"all_reduce": ("all_reduce", "reduce_scatter")}


def kind(name: str) -> str:
    """The collective family of ``name`` (``"all_gather"``, ``"reduce_scatter"``, ``"all_reduce"``,
    ``"all_to_all"``, ``"broadcast"``, ``"send_recv"``, ``"barrier"``, ``"reduce"``, ``"gather"``, ``"scatter"``),
    else ``"other"``."""
    plain = name.rsplit("::", 1)[-1].split(":", 1)[-1].lower().replace("_", "")
    if plain.startswith("nccldevkernel") or plain.startswith("ncclkernel"):
        plain = plain.split("kernel", 1)[1]
    return next((family for token, family in _FAMILIES if token in plain), "other")


def issued_kinds(range_starts: np.ndarray, range_kinds: list[str], op_starts: np.ndarray,
                 op_kinds: list[str]) -> list[str | None]:
    """For each gloo work range (in start order), the kind of the ``c10d::`` operator that issued it, or None when
    none fits (its operator ran before the trace began).

    Each range takes the earliest operator not taken yet that started before it and whose kind it may run.
    """
    queues: dict[str, deque[tuple[int, int]]] = {}
    for i in np.argsort(op_starts, kind="stable").tolist():
        queues.setdefault(op_kinds[i], deque()).append((int(op_starts[i]), i))
    out: list[str | None] = []
    for start, k in zip(range_starts.tolist(), range_kinds):
        best = None
        for candidate in _RUNS_AS.get(k, (k,)):
            q = queues.get(candidate)
            if q and q[0][0] <= start and (best is None or q[0] < queues[best][0]):
                best = candidate
        out.append(best)
        if best is not None:
            queues[best].popleft()
    return out
