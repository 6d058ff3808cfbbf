from tracebuilder import TraceBuilder

import json

from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.operators import operator_stats
from lightning_streamprof.trace import parse_trace


def test_host_self_and_device_time_by_hand():
    b = TraceBuilder()
    # thread 1: linear [0,100) contains addmm [10,60) which contains mm [20,50); another mm [70,90)
    b.op("aten::linear", 0, 100)
    b.op("aten::addmm", 10, 50)
    mm1 = b.op("aten::mm", 20, 30)
    mm2 = b.op("aten::mm", 70, 20)
    # thread 2 overlaps in time but is not nested in thread 1's ops
    b.op("aten::mm", 15, 40, tid=2)
    b.kernel("gemm", 30, 12, external_id=mm1)
    b.kernel("gemm", 95, 8, external_id=mm2)
    b.kernel("memcpy", 40, 3, external_id=mm1, cat="gpu_memcpy")
    stats = {s.name: s for s in operator_stats(TraceContext(parse_trace(json.dumps(b.to_dict()).encode())))}
    us = 1000
    assert stats["aten::linear"].host_self_ns == (100 - 50 - 20) * us
    assert stats["aten::addmm"].host_self_ns == (50 - 30) * us
    assert stats["aten::mm"].calls == 3
    assert stats["aten::mm"].host_self_ns == (30 + 20 + 40) * us
    assert stats["aten::mm"].host_total_ns == (30 + 20 + 40) * us
    assert stats["aten::mm"].device_self_ns == (12 + 8 + 3) * us
    assert stats["aten::linear"].device_self_ns == 0
    assert next(iter(stats)) == "aten::mm"  # sorted by host + device self time
