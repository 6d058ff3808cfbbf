"""PyTorch's memory snapshot, read without torch from a hand-made snapshot in the format torch writes: the curve, the
peak and the live allocations at the peak by the user's line; what is not a snapshot is refused in one line;
``memory_snapshot=True`` without CUDA says so in one line; on a GPU the peak is within 1 MiB of torch's own."""

import pickle

import fsspec
import pytest
import torch

from lightning_streamprof import StreamProfiler
from lightning_streamprof.analysis import memory_snapshot as ms
from lightning_streamprof.report.memory_snapshot import snapshots_html

MiB = 2**20
USER = "/work/project/model.py"


def frames(*where):
    return [{"filename": f, "line": line, "name": name} for f, line, name in where]


TORCH_FRAME = ("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward")


def entry(action, addr, size, t, *where):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames(*where)}


def snapshot():
    """Device 0: 1 MiB allocated and a 4 MiB segment before the history; a 4 MiB segment, then 2, 3 and 1 MiB
    allocated (the peak: 7 MiB), 3 MiB freed (counted at its request, as torch's counters do) and 1 MiB (whose
    request was not recorded: at its completion). Device 1: no history."""
    trace = [
        entry("segment_alloc", 0x10000000, 4 * MiB, 1000),
        entry("alloc", 0x2000, 2 * MiB, 1010, TORCH_FRAME, (USER, 12, "forward")),
        entry("alloc", 0x3000, 3 * MiB, 1020, (USER, 20, "loss")),
        entry("alloc", 0x4000, 1 * MiB, 1030, TORCH_FRAME, (USER, 12, "forward")),
        entry("free_requested", 0x3000, 3 * MiB, 1040),
        entry("free_completed", 0x3000, 3 * MiB, 1050),
        entry("free_completed", 0x4000, 1 * MiB, 1060),
    ]
    segments = [
        {"device": 0, "address": 0x1000, "total_size": 4 * MiB, "allocated_size": 1 * MiB, "stream": 0,
         "segment_type": "large", "blocks": [
             {"address": 0x1000, "size": 1 * MiB, "requested_size": 1 * MiB, "state": "active_allocated",
              "frames": []},
             {"address": 0x1000 + MiB, "size": 3 * MiB, "requested_size": 0, "state": "inactive", "frames": []}]},
        {"device": 0, "address": 0x10000000, "total_size": 4 * MiB, "allocated_size": 2 * MiB, "stream": 0,
         "segment_type": "large", "blocks": [
             {"address": 0x2000, "size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_allocated",
              "frames": frames(TORCH_FRAME, (USER, 12, "forward"))}]},
    ]
    return {"segments": segments, "device_traces": [trace, []]}


def test_the_curve_the_peak_and_the_live_allocations_at_the_peak():
    (mem,) = ms.snapshot_memory(pickle.dumps(snapshot()), "w/rank0.memory_snapshot.pickle", rank=0, window=3)
    assert (mem.device, mem.rank, mem.window, mem.entries) == (0, 0, 3, 7)
    assert mem.curve == [(0, MiB, 4 * MiB), (0, MiB, 8 * MiB), (10, 3 * MiB, 8 * MiB), (20, 6 * MiB, 8 * MiB),
                         (30, 7 * MiB, 8 * MiB), (40, 4 * MiB, 8 * MiB), (60, 3 * MiB, 8 * MiB)]
    assert (mem.peak_allocated, mem.peak_reserved, mem.peak_us) == (7 * MiB, 8 * MiB, 30)
    rows = [(r.location, r.function, r.bytes, r.count) for r in mem.at_peak]
    assert rows == [(f"{USER}:12", "forward", 3 * MiB, 2), (f"{USER}:20", "loss", 3 * MiB, 1),
                    (ms.BEFORE, "", MiB, 0)]
    assert sum(r.bytes for r in mem.at_peak) == mem.peak_allocated


def test_a_free_counts_at_its_request_and_a_block_pending_free_at_the_dump_is_not_allocated():
    """1 MiB allocated before the history and 2 MiB in it; the 2 MiB are freed on request and their block is still
    pending (a stream uses it) at the dump; the 1 MiB allocated before is freed on request in the history."""
    trace = [entry("alloc", 0x2000, 2 * MiB, 0, (USER, 5, "f")), entry("free_requested", 0x2000, 2 * MiB, 10),
             entry("free_requested", 0x1000, MiB, 20), entry("free_completed", 0x1000, MiB, 30)]
    blocks = [{"address": 0x2000, "size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_pending_free",
               "frames": []}]
    segments = [{"device": 0, "address": 0x1000, "total_size": 4 * MiB, "blocks": blocks}]
    (mem,) = ms.snapshot_memory(pickle.dumps({"segments": segments, "device_traces": [trace]}))
    assert [a for _, a, _ in mem.curve] == [MiB, 3 * MiB, MiB, 0]
    assert mem.peak_allocated == 3 * MiB and mem.peak_us == 0


def test_the_live_allocations_at_the_dump_by_line():
    """The segments' active blocks: 2 MiB at the user's line 12, 1 MiB without a frame; the inactive block is not
    live."""
    rows = ms.live_at_dump(snapshot())
    assert [(r.location, r.bytes, r.count) for r in rows] == [(f"{USER}:12", 2 * MiB, 1), (ms.NO_FRAMES, MiB, 1)]


def test_the_out_of_memory_line_names_the_live_allocations_by_line():
    from lightning_streamprof.profiling.out_of_memory import _largest

    assert _largest(snapshot()) == f"; largest live allocations: 2.0 MiB in 1 at {USER}:12"
    assert _largest({"segments": [], "device_traces": []}) == ""


def test_the_users_frame_is_the_innermost_outside_the_libraries():
    assert ms.user_frame(frames(TORCH_FRAME, (USER, 7, "step"))) == (f"{USER}:7", "step")
    assert ms.user_frame(frames(TORCH_FRAME)) == (f"{TORCH_FRAME[0]}:125", "forward")  # none of the user's
    assert ms.user_frame([]) is None and ms.user_frame("junk") is None


def test_a_long_history_is_thinned_and_keeps_its_peak():
    trace = [entry("alloc", i, 1, i) for i in range(5000)] + [entry("free_completed", i, 1, 5000 + i)
                                                                for i in range(5000)]
    (mem,) = ms.snapshot_memory(pickle.dumps({"segments": [], "device_traces": [trace]}))
    assert len(mem.curve) <= ms.CURVE_POINTS + 1
    assert (mem.peak_us, mem.peak_allocated) == (4999, 5000) and (4999, 5000, 0) in mem.curve
    assert mem.at_peak == [ms.LiveAllocations(location=ms.NO_FRAMES, function="", bytes=5000, count=5000)]


class Payload:
    def __reduce__(self):
        return (print, ("ran",))


@pytest.mark.parametrize("data, reason", [
    (pickle.dumps(Payload()), "the snapshot holds an object of builtins.print"),
    (b"not a pickle", "not a pickle"),
    (pickle.dumps({"segments": []}), "no 'device_traces' in it"),
])
def test_what_is_not_a_snapshot_is_refused_without_running_it(data, reason, capsys):
    with pytest.raises(ms.SnapshotError, match=reason):
        ms.snapshot_memory(data)
    assert "ran" not in capsys.readouterr().out


def test_snapshots_are_read_from_a_store_and_a_bad_one_is_one_line():
    fs = fsspec.filesystem("memory")
    fs.pipe("/streamprof-snap/w0/rank0.memory_snapshot.pickle", pickle.dumps(snapshot()))
    fs.pipe("/streamprof-snap/w0/rank1.memory_snapshot.pickle", b"garbage")
    found, problems = ms.read_snapshots([("memory://streamprof-snap/w0/rank0.memory_snapshot.pickle", 0, 0),
                                         ("memory://streamprof-snap/w0/rank1.memory_snapshot.pickle", 1, 0)])
    assert [m.peak_allocated for m in found] == [7 * MiB]
    (problem,) = problems
    assert problem.startswith("memory://streamprof-snap/w0/rank1.memory_snapshot.pickle: could not read the memory "
                              "snapshot: not a pickle: ")


def test_the_html_shows_the_curve_and_the_allocations_at_the_peak():
    (mem,) = ms.snapshot_memory(pickle.dumps(snapshot()), "w/rank0.memory_snapshot.pickle", rank=0, window=3)
    html = snapshots_html([mem])
    assert "<svg" in html and "reserved MiB" in html
    assert "window 3 rank 0 cuda:0: peak allocated 7.0 MiB, reserved 8.0 MiB" in html
    assert f"{USER}:12" in html and "forward" in html
    assert snapshots_html([]) == ""
    import msgspec

    html = snapshots_html([msgspec.structs.replace(mem, blocks_peak=7 * MiB + MiB // 2)])
    assert ("peak allocated 7.0 MiB (7.5 MiB in the allocator's blocks, torch.cuda.max_memory_allocated), reserved"
            in html)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the line for a machine without CUDA")
def test_without_cuda_one_line_says_no_snapshot_is_recorded(tmp_path):
    from helpers import fit

    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=2, every=0, memory_snapshot=True)
    fit(prof, tmp_path, max_steps=8)
    lines = [line for line in prof.summary().splitlines() if "memory_snapshot=True" in line]
    assert lines == ["StreamProfiler: memory_snapshot=True: no CUDA device here, so no memory snapshot is recorded"]
    with open(prof.report_path, encoding="utf-8") as f:
        assert "memory_snapshot=True: no CUDA device here, so no memory snapshot is recorded" in f.read()
    assert not list((tmp_path / "t").rglob("*.memory_snapshot.pickle"))
    prof = StreamProfiler(dirpath=tmp_path / "u", skip_first=2, warmup=1, active=2, every=0, oom_stacks=True)
    fit(prof, tmp_path, max_steps=8)
    lines = [line for line in prof.summary().splitlines() if "oom_stacks=True" in line]
    assert lines == ["StreamProfiler: oom_stacks=True: no CUDA device here, so no allocation's stack is kept"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_windows_snapshot_is_beside_its_trace_and_its_peak_is_torchs(tmp_path):
    from helpers import fit
    from lightning.pytorch.demos.boring_classes import BoringModel

    class Big(BoringModel):
        def training_step(self, batch, batch_idx):
            scratch = torch.randn(256 + 64 * (batch_idx % 4), 1024, 1024, device=self.device)  # 1-1.75 GiB
            return super().training_step(batch, batch_idx)["loss"] + 0 * scratch.sum()

    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=4, every=0, memory_snapshot=True,
                          max_overhead=None)
    fit(prof, tmp_path, max_steps=12, accelerator="gpu", model=Big())
    (window,) = prof.windows
    (path,) = list((tmp_path / "t").rglob("rank0.memory_snapshot.pickle"))
    assert path.parent.name == window.path.rsplit("/", 2)[-2]  # beside the trace
    with open(path, "rb") as f:
        data = f.read()
    from torch.cuda import _memory_viz

    assert "entries" in _memory_viz.trace(pickle.loads(data))  # torch's own viewer reads it
    (mem,) = ms.snapshot_memory(data)
    memory = prof._profiled.recorder.memory
    assert abs(mem.peak_allocated - memory.requested_peaks[window.window]) <= MiB
    assert abs(mem.peak_allocated - memory.peaks[window.window]) <= MiB  # 1-1.75 GiB tensors: blocks fit them
    with open(prof.report_path, encoding="utf-8") as f:
        html = f.read()
    assert "largest live allocations at the peak" in html and "in the allocator's blocks" in html


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_resnet50_windows_snapshot_loads_in_torchs_viewer_and_its_peak_is_torchs(tmp_path):
    import lightning as L
    import torchvision
    from helpers import fit
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, TensorDataset

    class ResNet50(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torchvision.models.resnet50(num_classes=10)

        def training_step(self, batch, batch_idx):
            images, labels = batch
            return F.cross_entropy(self.net(images), labels)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def train_dataloader(self):
            data = TensorDataset(torch.randn(64, 3, 224, 224), torch.randint(0, 10, (64,)))
            return DataLoader(data, batch_size=32, shuffle=True)

    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=3, every=0, memory_snapshot=True,
                          max_overhead=None)
    fit(prof, tmp_path, max_steps=10, accelerator="gpu", model=ResNet50())
    (window,) = prof.windows
    (path,) = list((tmp_path / "t").rglob("rank0.memory_snapshot.pickle"))
    data = path.read_bytes()
    from torch.cuda import _memory_viz

    assert "entries" in _memory_viz.trace(pickle.loads(data))
    (mem,) = ms.snapshot_memory(data)
    memory = prof._profiled.recorder.memory
    requested, blocks = memory.requested_peaks[window.window], memory.peaks[window.window]
    assert requested > 1 << 30 and abs(mem.peak_allocated - requested) <= MiB, (mem.peak_allocated, requested)
    assert requested <= blocks <= 1.02 * requested  # max_memory_allocated counts the blocks, rounded up
    assert any(r.location.startswith(__file__) for r in mem.at_peak), mem.at_peak


def test_the_allocators_records_from_fit_to_window_and_back(monkeypatch):
    """The light record over the fit, each window's history from an empty one, the light record back after it, off
    at the end; a torch without ``clear_history`` is asked again without it (the allocator's API stubbed)."""
    from lightning_streamprof.profiling import memory_snapshot as snap

    calls = []

    def record(enabled="all", context="all", stacks="all", max_entries=None, clear_history=None, **_):
        if clear_history is not None and old_torch:
            raise TypeError("unexpected keyword argument 'clear_history'")
        calls.append((enabled, context, clear_history))

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: None)
    for old_torch in (False, True):
        calls.clear()
        memory = snap.MemorySnapshots(windows=True, light=True)
        memory.begin()
        assert memory.recording
        memory.start()
        memory.stop(0, None)  # a window left unwritten: nothing dumped
        memory.end()
        cleared = None if old_torch else True
        assert calls == [("state", "state", cleared), ("all", "all", cleared), ("state", "state", cleared),
                         (None, "all", None)]
        assert not memory.recording and not memory.problems


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_each_windows_snapshot_holds_its_own_steps_only(tmp_path):
    from helpers import fit
    from lightning.pytorch.demos.boring_classes import BoringModel

    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=3, every=10, repeat=3,
                          memory_snapshot=True, max_overhead=None)
    fit(prof, tmp_path, max_steps=40, accelerator="gpu", model=BoringModel())
    paths = sorted((tmp_path / "t").rglob("rank0.memory_snapshot.pickle"))
    assert len(paths) == 3
    entries = [ms.snapshot_memory(p.read_bytes())[0].entries for p in paths]
    assert max(entries) <= 1.5 * min(entries), entries  # the same steps each, none carried over
