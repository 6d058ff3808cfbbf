"""The recommendations from HTA's analyses, on built traces whose numbers are derived here (times in µs)."""

import pytest

from lightning_streamprof.analysis import analyze_table
from tracebuilder import TraceBuilder

US = 1000


def _ids(result):
    return {r.id: r for r in result.recommendations}


def late_launches(sync: bool) -> TraceBuilder:
    """Step [0, 1000): ten 10 µs kernels on stream 7, kernel i launched at 100 i + 50 (call 5 µs), running at
    100 i + 60: each launched after the previous ended, so every gap (90 µs) is host wait: 810 of the stream's
    span 910 (89.0%); the queue holds one operation for 5 of every 100 µs. With ``sync`` the training thread
    waits 500 µs in cudaStreamSynchronize (host busy 50%, not host-bound by its rule)."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    for i in range(10):
        b.launch(f"K{i}", 100 * i + 50, 100 * i + 60, 10, 900, rt_dur=5)
    if sync:
        b.runtime("cudaStreamSynchronize", 400, 500, 900)
    return b


def test_gpu_waits_for_host_where_host_bound_does_not_say_it():
    result = analyze_table(late_launches(sync=True).table())
    found = _ids(result)
    assert "host_bound" not in found
    rec = found["gpu_waits_for_host"]
    assert rec.evidence["host_wait_share"] == pytest.approx(810 / 910)
    assert rec.evidence["host_wait_ms_per_step"] == 0.81
    assert rec.evidence["mean_queue_length"] < 1.0 and rec.evidence["max_queue_length"] == 1
    assert "0.810 ms per step (89.0% of the stream's time)" in rec.message


def test_host_bound_carries_the_queue_numbers():
    found = _ids(analyze_table(late_launches(sync=False).table()))
    assert "gpu_waits_for_host" not in found  # said once, by host_bound
    host = found["host_bound"]
    assert host.evidence["host_wait_share"] == pytest.approx(810 / 910)
    assert "the launch queue holds" in host.message and "89.0% of the stream's time" in host.message


def queued_small_kernels() -> TraceBuilder:
    """Step [0, 400): forty launches at 0, 1, ... 39 µs (1 µs calls) of 5 µs kernels on stream 7 running from
    50 µs with 2 µs between them (kernel wait: launched long before, gap under 30 µs): busy 200, kernel wait
    39 x 2 = 78 of the span 278 (28.1%); the queue is 40 deep at 40 µs and drains one per 7 µs."""
    b = TraceBuilder()
    b.step(1, 0, 400)
    for i in range(40):
        b.launch(f"K{i % 4}", i, 50 + 7 * i, 5, 900)
    return b


def test_small_kernels():
    rec = _ids(analyze_table(queued_small_kernels().table()))["small_kernels"]
    assert rec.evidence["kernel_wait_share"] == pytest.approx(78 / 278)
    assert rec.evidence["operations_per_step"] == 40 and rec.evidence["mean_operation_ms"] == 0.005
    assert rec.evidence["mean_queue_length"] >= 8 and rec.evidence["max_queue_length"] >= 39


def copies(pageable_us: int, pinned_small: bool) -> TraceBuilder:
    """Step [0, 5000). A pinned 4 MB HtoD copy in 200 µs (20 GB/s: the link's reach) and either a pageable 4 MB
    copy in ``pageable_us`` or, with ``pinned_small``, fifty pinned 1 KB copies of 10 µs (0.1 GB/s)."""
    b = TraceBuilder()
    b.step(1, 0, 5000)
    b.launch("Memcpy HtoD (Pinned -> Device)", 10, 20, 200, 900, cat="gpu_memcpy", rt_name="cudaMemcpyAsync",
             bytes=4_000_000)
    if pinned_small:
        for i in range(50):
            b.launch("Memcpy HtoD (Pinned -> Device) ", 300 + 20 * i, 300 + 20 * i + 5, 10, 900, cat="gpu_memcpy",
                     rt_name="cudaMemcpyAsync", bytes=1000)
    else:
        b.launch("Memcpy HtoD (Pageable -> Device)", 300, 310, pageable_us, 900, cat="gpu_memcpy",
                 rt_name="cudaMemcpyAsync", bytes=4_000_000)
    return b


def test_slow_pageable_copy():
    """Pageable 4 MB in 1,000 µs: 4 GB/s, 20% of 20 GB/s, 20% of the 5 ms step."""
    (rec,) = [r for r in analyze_table(copies(1000, False).table()).recommendations if r.id == "slow_copies"]
    assert rec.evidence["gbps"] == pytest.approx(4.0) and rec.evidence["link_gbps"] == pytest.approx(20.0)
    assert rec.evidence["pageable"] and rec.evidence["ms_per_step"] == 1.0
    assert "pin_memory=True" in rec.message and "20% of the 20.0 GB/s" in rec.message


def test_pageable_copy_near_the_link_is_not_slow():
    """Pageable 4 MB in 250 µs: 16 GB/s, 80% of the link."""
    assert "slow_copies" not in _ids(analyze_table(copies(250, False).table()))


def test_small_copies():
    """Fifty 1 KB copies of 10 µs: 0.1 GB/s, 500 µs (10% of the step)."""
    (rec,) = [r for r in analyze_table(copies(0, True).table()).recommendations if r.id == "slow_copies"]
    assert rec.evidence["gbps"] == pytest.approx(0.1) and rec.evidence["calls"] == 50
    assert not rec.evidence["pageable"] and "small pieces" in rec.message


def test_no_finding_without_device_work():
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::mm", 10, 50)
    found = _ids(analyze_table(b.table()))
    assert not {"gpu_waits_for_host", "small_kernels", "slow_copies"} & set(found)
