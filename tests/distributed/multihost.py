"""A hand-built run of 4 ranks on two hosts (ranks 0-1 on ``node-a``, 2-3 on ``node-b``), each host's traces in a
directory of its own, as each host's disk holds them. Times in µs.

Two steps (#5: [0, 100), #6: [100, 200)). Per step every rank computes from 10, ranks 0-2 for 30 µs, rank 3 for
60; then one all-reduce (group "0", one sequence number per step) that ends at 80 on every rank: ranks 0-2 start
it at 40 (40 µs, of which 30 waiting), rank 3 at 70 (10 µs: the transfer). Own time per step: ranks 0-2
100 - 30 = 70, rank 3 100: rank 3's relative score is 70 / 100 = 0.70, a straggler.
"""

from __future__ import annotations

import os

from tracebuilder import TraceBuilder

RUN, WINDOW_DIR = "fit-20261201-120000", "w000-step0000005"
HOSTS = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}


def rank_trace(rank: int) -> TraceBuilder:
    b = TraceBuilder(rank=rank, world_size=4)
    b.meta["streamprof"] = {"run": RUN, "window": 0, "first_step": 5, "host": HOSTS[rank]}
    for k, step in enumerate((5, 6)):
        base = 100 * k
        b.step(step, base, 100)
        ext = b.op("aten::mm", base + 9, 2)
        b.launch("sm90_gemm", base + 9, base + 10, 60 if rank == 3 else 30, ext)
        start = base + (70 if rank == 3 else 40)
        args = {"Collective name": "allreduce", "Process Group Name": "0", "Seq": k + 1, "In msg nelems": 256,
                "Out msg nelems": 256, "dtype": "Float", "Group size": 4}
        ext = b.op("record_param_comms", base + 30, 1, **args)
        b.launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", base + 30, start, base + 80 - start, ext, stream=20,
                 **args)
    return b


def write_hosts(root) -> dict[str, str]:
    """Each host's directory (``<root>/<host>/streamprof``) with its ranks' traces; returns host -> directory."""
    out = {}
    for rank, host in HOSTS.items():
        base = os.path.join(str(root), host, "streamprof")
        target = os.path.join(base, RUN, WINDOW_DIR)
        os.makedirs(target, exist_ok=True)
        rank_trace(rank).write(os.path.join(target, f"rank{rank}.{1000 + rank}.pt.trace.json.gz"))
        out[host] = base
    return out
