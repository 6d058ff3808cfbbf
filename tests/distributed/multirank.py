"""Hand-built two-rank traces (times in µs) whose distributed numbers are computed by hand in the tests.

Rank 0 waits: its collectives start early and last long; rank 1 arrives late at every collective. The two
ranks' collectives start in a different order (process groups "0" and "1"), so matching by order would pair
an all-reduce with an all-gather.
"""

from __future__ import annotations

import os

from tracebuilder import TraceBuilder

# (name, group, seq, [start, end) on rank 0, [start, end) on rank 1, step)
CALLS = [
    ("allreduce", "0", 1, (30, 70), (72, 80), 10),
    ("allgather", "1", 1, (75, 85), (62, 70), 10),
    ("allreduce", "0", 2, (160, 190), (180, 190), 11),
]
COMPUTE = {0: [(10, 40), (110, 150)], 1: [(10, 60), (110, 170)]}
NELEMS = {("allreduce", "0"): (1000, 1000, "Float"), ("allgather", "1"): (250, 500, "BFloat16")}


def rank_trace(rank: int, on_kernel: bool = True, run: str = "fit-x", window: int = 0, host: str = "node-a"):
    """Two steps (#10: [0, 100), #11: [100, 200)) of ``rank``; with ``on_kernel`` the collective arguments
    are on the NCCL kernels, else only on the ``record_param_comms`` operator that launched them."""
    b = TraceBuilder(rank=rank, world_size=2)
    b.meta["streamprof"] = {"run": run, "window": window, "first_step": 10, "host": host}
    b.step(10, 0, 100)
    b.step(11, 100, 100)
    for k, (lo, hi) in enumerate(COMPUTE[rank]):
        ext = b.op("aten::mm", lo - 5 + 1, 2)
        b.launch("sm90_gemm", lo - 5 + 1, lo, hi - lo, ext)
    for name, group, seq, r0, r1, step in CALLS:
        lo, hi = (r0, r1)[rank]
        in_n, out_n, dtype = NELEMS[(name, group)]
        args = {"Collective name": name, "Process Group Name": group, "Seq": seq, "In msg nelems": in_n,
                "Out msg nelems": out_n, "dtype": dtype, "Group size": 2}
        host_ts = (step - 10) * 100 + 20 + seq
        ext = b.op("record_param_comms", host_ts, 1, **args)
        kernel = f"ncclDevKernel_{'AllReduce_Sum_f32' if name == 'allreduce' else 'AllGather'}_RING_LL"
        b.launch(kernel, host_ts, lo, hi - lo, ext, stream=20 + int(group), **(args if on_kernel else {}))
    return b


def write_run(root, on_kernel: bool = True) -> str:
    """Both ranks' traces laid out as StreamProfiler writes them; returns the run directory."""
    target = os.path.join(str(root), "fit-x", "w000-step0000010")
    os.makedirs(target, exist_ok=True)
    for rank in (0, 1):
        rank_trace(rank, on_kernel).write(os.path.join(target, f"rank{rank}.1.pt.trace.json.gz"))
    return os.path.join(str(root), "fit-x")
