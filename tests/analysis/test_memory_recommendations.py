import json

import numpy as np
import pytest
from handbuilt import US, build
from tracebuilder import TraceBuilder

from lightning_streamprof.analysis import analyze_table
from lightning_streamprof.analysis.memory import downsample, memory_stats
from lightning_streamprof.results import to_builtins, to_json


def test_memory_by_operator_by_hand():
    """GPU0: mm gets +1000 and +500; linear (outside mm) -1000, so its total is +500 with 1500 B in 2 allocations;
    add +4000; the -10 free outside any operator belongs to no operator. CPU: add +64."""
    mem = memory_stats(build().context())
    ops = {(m.device, m.name): m for m in mem.operators}
    mm = ops[("GPU0", "aten::mm")]
    assert (mm.self_increase_bytes, mm.self_allocation_bytes, mm.self_allocations) == (1500, 1500, 2)
    assert (mm.increase_bytes, mm.allocation_bytes, mm.allocations, mm.calls) == (1500, 1500, 2, 1)
    lin = ops[("GPU0", "aten::linear")]
    assert (lin.self_increase_bytes, lin.self_allocation_bytes, lin.self_allocations) == (-1000, 0, 0)
    assert (lin.increase_bytes, lin.allocation_bytes, lin.allocations) == (500, 1500, 2)
    add = ops[("GPU0", "aten::add")]
    assert (add.self_increase_bytes, add.increase_bytes, add.allocations) == (4000, 4000, 1)
    cpu = ops[("CPU", "aten::add")]
    assert (cpu.self_increase_bytes, cpu.self_allocation_bytes, cpu.self_allocations) == (64, 64, 1)
    assert set(ops) == {("GPU0", "aten::mm"), ("GPU0", "aten::linear"), ("GPU0", "aten::add"), ("CPU", "aten::add")}


def test_memory_peaks_and_curve():
    mem = memory_stats(build().context())
    gpu = next(d for d in mem.devices if d.device == "GPU0")
    assert (gpu.peak_allocated_bytes, gpu.peak_reserved_bytes, gpu.device_id) == (4500, 6000, 0)
    assert [p[1] for p in gpu.curve] == [1000, 1500, 500, 4490, 4500]  # time order: the free at 101 precedes 111
    assert gpu.curve[0][0] == 15 * US
    assert mem.peak(0) == 4500 and mem.peak(1) is None
    cpu = next(d for d in mem.devices if d.device == "CPU")
    assert cpu.peak_allocated_bytes == 64


def test_downsample_keeps_peak_and_ends():
    n = 10_000
    ts = np.arange(n, dtype=np.int64)
    alloc = (np.sin(ts / 300.0) * 1000 + 2000).astype(np.int64)
    alloc[4321] = 10**6
    curve = downsample(ts, alloc, alloc, max_points=200)
    assert len(curve) <= 200
    assert (4321, 10**6, 10**6) in curve
    assert curve[0][0] == 0 and curve[-1][0] == n - 1
    assert [p[0] for p in curve] == sorted(p[0] for p in curve)


def test_no_memory_events():
    b = TraceBuilder()
    b.op("aten::add", 0, 5)
    mem = memory_stats(b.context())
    assert mem.devices == [] and mem.operators == []


def _ids(analysis):
    return {r.id: r for r in analysis.recommendations}


def test_recommendations_on_handbuilt_trace():
    """DataLoader: (8 + 0 + 6) / 3 µs of a (105 + 125 + 20) / 3 µs mean step = 5.6% > 5%. Device 1 is 8% busy.
    Eligible kernels without TC: 70 of 110 µs > 50%. Peak 4500 B > 90% of 4800 B. Communication 4% < 10%.
    Host: no synchronising call, DataLoader 14 of the 250 µs of host steps: busy 94.4% > 80% -> host-bound."""
    rec = _ids(analyze_table(build().table()))
    assert set(rec) == {"dataloader", "low_gpu_utilization", "tensor_cores", "memory", "host_bound"}
    assert rec["host_bound"].evidence["host_busy_share"] == pytest.approx(1 - 14 / 250)
    assert rec["dataloader"].evidence["share"] == pytest.approx(14 / 250)
    assert rec["dataloader"].evidence["saving_ms_per_step"] == pytest.approx(round(14 / 3 / 1000, 3))
    assert rec["low_gpu_utilization"].evidence["devices"] == [1]
    assert rec["memory"].evidence["share"] == pytest.approx(4500 / 4800)
    assert rec["tensor_cores"].evidence["eligible_share"] == pytest.approx(110 / 200)
    assert "5.6% of each step" in rec["dataloader"].message


def test_communication_and_pipeline_recommendations():
    """Step [0,100): nccl:all_reduce op [5,8) + its kernel [10,30) = 23% communication; the after-batch-transfer
    hook [40,55) = 15%;
    the frozen backbone's forward [60,72) = 12%; the LightningModule itself (named like a backbone) is not
    taken for a frozen module."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    op = b.op("nccl:all_reduce", 5, 3)
    b.launch("ncclDevKernel_AllReduce", 6, 10, 20, op, blocks=1.0, occupancy=0.5)
    b.annotation("[pl][profile][LightningModule]BackboneModel.on_after_batch_transfer", 40, 15)
    b.frame("nn.Module: BackboneModel_0", 58, 40)
    b.frame("nn.Module: FrozenEncoder_0", 60, 12)
    rec = analyze_table(b.table()).recommendations
    ids = [r.id for r in rec]
    assert "communication" in ids and ids.count("stream_pipeline") == 2
    comm = next(r for r in rec if r.id == "communication")
    assert comm.evidence["share"] == pytest.approx(0.23)
    hook, frozen = (r for r in rec if r.id == "stream_pipeline")
    assert hook.evidence["what"] == "on_after_batch_transfer" and hook.evidence["share"] == pytest.approx(0.15)
    assert frozen.evidence["names"] == ["nn.Module: FrozenEncoder_0"]
    assert frozen.evidence["share"] == pytest.approx(0.12)
    assert "StreamPipeline" in hook.message
    b.annotation("[pl][profile][StreamPipeline].stage_next_batch", 80, 10)  # already pipelined: no advice
    after = [r.id for r in analyze_table(b.table()).recommendations]
    assert "stream_pipeline" not in after and "communication" in after


def test_tensor_core_rule_of_tb_profiler():
    """No Tensor Core kernel at all while an eligible operator launched kernels on a compute-capability-8 GPU."""
    b = TraceBuilder()
    b.device_properties({"id": 0, "totalGlobalMem": 10**12, "computeMajor": 8})
    b.step(1, 0, 100)
    op = b.op("aten::conv2d", 1, 90)
    b.launch("implicit_convolve_sgemm", 2, 5, 90, op, blocks=2.0, occupancy=0.5)
    rec = _ids(analyze_table(b.table()))
    assert "tensor_cores" in rec and "low_gpu_utilization" not in rec
    assert rec["tensor_cores"].evidence["tc_share"] == 0.0


def test_json_is_the_schema_encoded():
    out = json.loads(to_json(analyze_table(build().table())))
    keys = {"device", "utilization", "sm_efficiency", "achieved_occupancy"}
    assert len(out["gpu"]) == 2 and all(set(g) >= keys for g in out["gpu"])
    steps = out["steps"]
    assert steps["count"] == 3 and steps["mean_ms"] == pytest.approx(250 / 3 / 1000)
    assert set(steps["breakdown_ms"]) == {"kernel", "memcpy", "memset", "communication", "runtime", "dataloader",
                                          "cpu_exec", "other"}
    assert sum(steps["breakdown_ms"].values()) == pytest.approx(steps["mean_ms"])
    assert [s["step"] for s in steps["per_step"]] == [1, 2, 3]
    assert {"kernels", "operators", "memory", "recommendations", "source_lines", "tensor_cores", "traces"} <= set(out)
    assert all(set(r) == {"id", "message", "evidence", "summary"} and r["summary"] for r in out["recommendations"])
    assert out["gpu"][0]["utilization"] == pytest.approx(0.64)
    assert out == json.loads(json.dumps(to_builtins(analyze_table(build().table()))))


def _launch_bound(sync_ts, sync_dur):
    """Step [0,100) µs on thread 1: conv2d [2,42) and relu [42,90) launch 20 kernels of 1 µs; the thread
    waits in cudaStreamSynchronize [sync_ts, sync_ts + sync_dur)."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    conv = b.op("aten::conv2d", 2, 40)
    relu = b.op("aten::relu", 42, 48)
    for i in range(10):
        b.launch("conv_kernel", 3 + 3 * i, 5 + 3 * i, 1, conv)
        b.launch("relu_kernel", 43 + i, 50 + 3 * i, 1, relu, rt_dur=0)
    b.runtime("cudaStreamSynchronize", sync_ts, sync_dur, relu)
    return _ids(analyze_table(b.table()))


def test_host_bound_when_the_training_thread_is_busy_and_the_gpu_waits():
    """Waiting 6 of 100 µs (synchronize): busy 94% > 80%; 20 launches; operators and runtime 2..96 = 94 µs;
    the GPU works 20 µs of the 100 µs step."""
    rec = _launch_bound(sync_ts=90, sync_dur=6)
    assert "host_bound" in rec and "low_gpu_utilization" in rec
    ev = rec["host_bound"].evidence
    assert ev["host_busy_share"] == pytest.approx(0.94)
    assert ev["host_wait_ms_per_step"] == pytest.approx(0.006)
    assert ev["operators_ms_per_step"] == pytest.approx(0.094)
    assert ev["launches_per_step"] == 20
    assert ev["gpu_busy_ms_per_step"] == pytest.approx(0.02) and ev["step_ms"] == pytest.approx(0.1)
    assert ev["saving_ms_per_step"] == pytest.approx(0.08)
    assert "94.0% of each step" in rec["host_bound"].message


def test_not_host_bound_when_the_thread_waits_for_the_device():
    """30 of 100 µs in cudaStreamSynchronize (inside relu, as in ``.item()``) leaves it busy 70% < 80%."""
    assert "host_bound" not in _launch_bound(sync_ts=60, sync_dur=30)



def _syncing_steps():
    """Two steps of 100 µs on thread 1 (GPU busy 20 µs in each). Step 1: ``.item()`` in train.py line 12
    waits 20 µs (aten::item > aten::_local_scalar_dense > cudaStreamSynchronize [40, 60)); step 2: the same
    (at [140, 160)) and a copy to the host in line 15 waits 10 µs ([170, 180) in aten::copy_). A
    synchronize at [230, 290), after the last step, is outside the steps."""
    b = TraceBuilder()
    for n, t0 in ((1, 0), (2, 100)):
        b.step(n, t0, 100)
        fn = b.frame("train.py(10): training_step", t0 + 1, 95)
        b.frame("train.py(12): training_step", t0 + 30, 35, parent=fn)
        item = b.op("aten::item", t0 + 30, 35)
        b.op("aten::_local_scalar_dense", t0 + 31, 33)
        b.runtime("cudaMemcpyAsync", t0 + 32, 2, item)
        b.runtime("cudaStreamSynchronize", t0 + 40, 20, item)
        b.launch("gemm", t0 + 2, t0 + 10, 20, b.op("aten::mm", t0 + 2, 5))
    b.frame("train.py(15): training_step", 168, 14)
    copy = b.op("aten::copy_", 168, 14)
    b.runtime("cudaStreamSynchronize", 170, 10, copy)
    b.runtime("cudaDeviceSynchronize", 230, 60, 0)
    return b


def test_host_sync_names_each_wait_with_its_operator_and_line():
    rec = _ids(analyze_table(_syncing_steps().table()))
    ev = rec["host_sync"].evidence
    assert ev["syncs_per_step"] == 1.5 and ev["wait_ms_per_step"] == pytest.approx(0.025)
    assert ev["share"] == pytest.approx(0.25) and ev["step_ms"] == pytest.approx(0.1)
    assert ev["gpu_idle_ms_per_step"] == pytest.approx(0.08)
    item, copy = ev["causes"]
    assert (item["operator"], item["source"], item["calls_per_step"], item["ms_per_step"]) == (
        "aten::_local_scalar_dense", "train.py:12", 1.0, 0.02)
    assert (copy["operator"], copy["source"], copy["calls_per_step"], copy["ms_per_step"]) == (
        "aten::copy_", "train.py:15", 0.5, 0.005)
    assert ".item()" in rec["host_sync"].message and "train.py:12" in rec["host_sync"].message


def test_no_host_sync_below_five_percent_or_outside_steps():
    """4 µs of a 100 µs step waits: 4% <= 5%. The long synchronize after the steps does not count."""
    assert "host_sync" not in _launch_bound(sync_ts=90, sync_dur=4)
    assert "host_sync" in _launch_bound(sync_ts=60, sync_dur=30)
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.launch("gemm", 2, 10, 20, b.op("aten::mm", 2, 5))
    b.runtime("cudaDeviceSynchronize", 150, 60, 0)
    assert "host_sync" not in _ids(analyze_table(b.table()))
