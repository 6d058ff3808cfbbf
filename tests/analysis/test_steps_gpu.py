import numpy as np
import pytest
from handbuilt import US, build
from tracebuilder import TraceBuilder

from lightning_streamprof.analysis import intervals as iv
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.gpu import gpu_metrics
from lightning_streamprof.analysis.steps import find_steps, step_breakdown
from lightning_streamprof.results import CATEGORIES
from lightning_streamprof.trace.reader import parse_document


def _iv(*pairs):
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def test_intervals():
    a = iv.merge(np.array([5, 0, 3, 20, 10, 30]), np.array([8, 4, 6, 25, 10, 31]))  # [10,10) is empty
    assert a[0].tolist() == [0, 20, 30] and a[1].tolist() == [8, 25, 31]
    assert iv.total(a) == 8 + 5 + 1
    touching = iv.merge(np.array([0, 5]), np.array([5, 9]))
    assert touching[0].tolist() == [0] and touching[1].tolist() == [9]
    b = _iv((2, 22), (24, 40))
    inter = iv.intersect(a, b)
    assert list(zip(*(x.tolist() for x in inter))) == [(2, 8), (20, 22), (24, 25), (30, 31)]
    sub = iv.subtract(a, b)
    assert list(zip(*(x.tolist() for x in sub))) == [(0, 2), (22, 24)]
    assert list(zip(*(x.tolist() for x in iv.clip(a, 3, 21)))) == [(3, 8), (20, 21)]
    assert iv.integrate(*a, None, np.array([0, 4, 0]), np.array([100, 22, 0])).tolist() == [14, 6, 0]
    weighted = iv.integrate(a[0], a[1], np.array([0.5, 1.0, 2.0]), np.array([0]), np.array([31]))
    assert weighted[0] == pytest.approx(4 + 5 + 2)
    assert iv.total(iv.intersect(a, iv.empty())) == 0 and iv.total(iv.subtract(a, iv.empty())) == 14


def test_steps_use_device_span_and_ignore_gpu_copies():
    """Step 1 ends when the NCCL kernel it launched ends (105); step 2 when k3 ends (230, past its host end 200);
    step 3 (no device work) starts at 230, when step 2 ends, and ends at its host end 250."""
    steps = find_steps(build().context())
    assert [s.name for s in steps] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert [(s.start_ns, s.end_ns) for s in steps] == [(0, 105 * US), (105 * US, 230 * US), (230 * US, 250 * US)]
    assert [s.device_events for s in steps] == [4, 3, 0]
    assert [(s.host_start_ns, s.host_end_ns) for s in steps][2] == (200 * US, 250 * US)


def test_breakdown_priority_claiming_by_hand():
    """Claiming, per step (µs):

    step 1 [0,105): kernel [20,90) = 70 (k1 ∪ k2 ∪ device-1 k4); communication: NCCL kernel [95,105) = 10
      (the nccl:all_reduce op [78,85) is already kernel time); runtime [12,16) = 4 (the others overlap kernels);
      dataloader [0,8) = 8; cpu_exec linear/mm minus claimed: [9,12) + [16,20) = 7; other [8,9) + [90,95) = 6.
    step 2 [105,230): kernel [150,230) = 80; memcpy [125,135) = 10; memset [140,145) = 5; runtime [112,115)
      + [120,125) = 8 ([126,127) is inside the memcpy); cpu_exec add: [110,112) + [115,120) = 7; other
      [105,110) + [135,140) + [145,150) = 15.
    step 3 [230,250): dataloader [232,238) = 6; cpu_exec relu [240,248) = 8; other 6.
    """
    bd = step_breakdown(build().context())
    expect = [
        dict(kernel=70, memcpy=0, memset=0, communication=10, runtime=4, dataloader=8, cpu_exec=7, other=6),
        dict(kernel=80, memcpy=10, memset=5, communication=0, runtime=8, dataloader=0, cpu_exec=7, other=15),
        dict(kernel=0, memcpy=0, memset=0, communication=0, runtime=0, dataloader=6, cpu_exec=8, other=6),
    ]
    assert bd.count == 3
    for row, want in zip(bd.per_step, expect):
        assert row.breakdown_ns == {k: v * US for k, v in want.items()}
        assert sum(row.breakdown_ns.values()) == row.duration_ns
    assert [row.step for row in bd.per_step] == [1, 2, 3]
    assert bd.mean_ms == pytest.approx((105 + 125 + 20) / 3 / 1000)
    for c in CATEGORIES:
        assert bd.breakdown_ms[c] == pytest.approx(sum(e[c] for e in expect) / 3 / 1000)


def test_no_steps_is_one_step_over_host_operators():
    b = TraceBuilder()
    b.op("aten::a", 5, 45)
    b.op("aten::b", 60, 10)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 50, 4)
    bd = step_breakdown(b.context())
    (step,) = bd.per_step
    assert bd.count == 1 and step.name == "whole trace" and step.step is None
    assert (step.start_ns, step.end_ns) == (5 * US, 70 * US)
    assert step.breakdown_ns["cpu_exec"] == 55 * US
    assert step.breakdown_ns["dataloader"] == 4 * US
    assert step.breakdown_ns["other"] == 6 * US


def test_empty_trace():
    empty = TraceContext(parse_document(b'{"traceEvents": []}'))  # the reader refuses it; the analyses cope
    assert step_breakdown(empty).count == 0
    assert gpu_metrics(empty) == []


def test_gpu_metrics_by_hand():
    """Span [0,250) µs. Device 0 kernels: k1 [20,60) 0.5 blocks/SM occ .25, k2 [40,90) 1.0 occ .5 (other stream),
    NCCL [95,105) 0.1 (no occupancy), k3 [150,230) 2.0 occ .75.

    utilization = (70 + 10 + 80) / 250; SM efficiency = (20·.5 + 20·1 + 30·1 + 10·.1 + 80·1) / 250 = 141/250;
    occupancy = (40·.25 + 50·.5 + 80·.75) / 170. Device 1: k4 [50,70) 0.2 occ .1.
    """
    gpus = {g.device: g for g in gpu_metrics(build().context())}
    assert set(gpus) == {0, 1}
    g0, g1 = gpus[0], gpus[1]
    assert g0.span_ns == 250 * US and g0.kernel_ns == 160 * US
    assert g0.utilization == pytest.approx(160 / 250)
    assert g0.sm_efficiency == pytest.approx(141 / 250)
    assert g0.achieved_occupancy == pytest.approx(95 / 170)
    assert g1.utilization == pytest.approx(20 / 250)
    assert g1.sm_efficiency == pytest.approx(0.2 * 20 / 250)
    assert g1.achieved_occupancy == pytest.approx(0.1)
    assert g0.name == "Test GPU" and g0.num_sms == 100 and g0.total_memory == 4800


def test_gpu_timeline_buckets():
    """Trace spans [0,250) µs: buckets of 10 µs (25 of them); bucket [20,30) is fully busy, [90,100) half."""
    g0 = {g.device: g for g in gpu_metrics(build().context())}[0]
    line = g0.timeline
    assert line.bucket_ns == 10 * US and len(line.starts_ns) == 25 and line.end_ns == 250 * US
    assert line.utilization[0] == 0 and line.utilization[2] == 1.0 and line.utilization[9] == pytest.approx(0.5)
    assert line.sm_efficiency[2] == pytest.approx(0.5)   # k1 alone
    assert line.sm_efficiency[4] == pytest.approx(1.0)   # k1 + k2 = 1.5, capped
    assert line.sm_efficiency[9] == pytest.approx(0.05)  # NCCL 0.1 for half the bucket


def test_sm_efficiency_ignores_kernels_without_blocks_and_clips_to_span():
    b = TraceBuilder()
    b.step(1, 0, 100)
    op = b.op("aten::mm", 0, 5)
    b.launch("k", 1, 90, 20, op, blocks=0.5, occupancy=0.4)   # half of it after the step's host end
    b.launch("k2", 2, 10, 10, op)                              # no blocks / occupancy recorded
    g = gpu_metrics(b.context(), span=(0, 100 * US))[0]
    assert g.utilization == pytest.approx(20 / 100)
    assert g.sm_efficiency == pytest.approx(0.5 * 10 / 100)
    assert g.achieved_occupancy == pytest.approx(0.4)


def test_cpu_exec_counts_host_ranges_as_tb_profiler_does():
    """Lightning's action ranges (``user_annotation``) are CPU Exec, as torch-tb-profiler counts them; their
    GPU-side copies are not. Step [0,100) holds run_training_batch [0,90) with one operator [10,20), and
    Optimizer.step [92,95) with its GPU copy [94,99): cpu_exec [0,90) + [92,95) = 93, other 7."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.annotation("[pl][profile]run_training_batch", 0, 90)
    b.op("aten::add", 10, 10)
    ext = b.annotation("Optimizer.step#SGD.step", 92, 3)
    b.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": "Optimizer.step#SGD.step", "pid": 0, "tid": 7,
                     "ts": 94, "dur": 5, "args": {"External id": ext}})
    parts = step_breakdown(b.context()).per_step[0].breakdown_ns
    assert parts["cpu_exec"] == 93 * US and parts["other"] == 7 * US


def test_driver_launches_link_device_work():
    """A kernel launched through cuLaunchKernel (cuda_driver) extends its step like a runtime launch."""
    b = TraceBuilder()
    b.step(1, 0, 50)
    b.step(2, 50, 50)
    op = b.op("aten::mm", 10, 10)
    b.launch("k", 12, 40, 30, op, rt_cat="cuda_driver", rt_name="cuLaunchKernel")
    steps = find_steps(b.context())
    assert [(s.start_ns, s.end_ns, s.device_events) for s in steps] == [(0, 70 * US, 1), (70 * US, 100 * US, 0)]


def test_lightning_fetch_counts_as_dataloader_only_without_torch_dataloader_ranges():
    def table(with_torch_range):
        b = TraceBuilder()
        b.step(1, 0, 100)
        b.annotation("[pl][profile][_TrainingEpochLoop].train_dataloader_next", 0, 20)
        if with_torch_range:
            b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 2, 15)
        b.op("aten::add", 30, 10)
        return b.context()

    assert step_breakdown(table(False)).per_step[0].breakdown_ns["dataloader"] == 20 * US
    assert step_breakdown(table(True)).per_step[0].breakdown_ns["dataloader"] == 15 * US
