"""An out-of-memory error in the training step: the profiler writes what it can say of the memory beside the windows
and lets the same exception go on; never a second error. On CPU the report says CUDA has nothing to say; on a GPU
(``gpu``) a real out-of-memory error writes the allocator's numbers, its summary and, with ``memory_snapshot=True``
during a window, its snapshot."""

import os
import pickle
import warnings

import pytest
import torch
from helpers import TinyModel, fit

from lightning_streamprof import StreamProfiler

OOM_AT = 6


class RunsOutOfMemory(TinyModel):
    raised = None

    def training_step(self, batch, batch_idx):
        if batch_idx == OOM_AT:
            type(self).raised = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            raise type(self).raised
        return super().training_step(batch, batch_idx)


def test_the_same_exception_goes_on_and_the_report_is_written(tmp_path):
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=2, every=0)
    with pytest.raises(torch.OutOfMemoryError) as info, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(prof, tmp_path, max_steps=20, model=RunsOutOfMemory())
    assert info.value is RunsOutOfMemory.raised
    (report,) = list((tmp_path / "t").rglob("rank0.out_of_memory.txt"))
    assert report.read_text().startswith(f"out of memory at step {OOM_AT}: CUDA is not available here")
    said = [str(w.message) for w in caught if "out of memory at step" in str(w.message)]
    assert len(said) == 1 and "rank0.out_of_memory.txt" in said[0]
    assert prof.windows and prof.windows[0].first_step == 3  # the scheduled window before it is still written


def test_a_report_that_cannot_be_written_is_no_second_error(tmp_path, monkeypatch):
    from lightning_streamprof.profiling import out_of_memory

    def broken(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(out_of_memory, "write_atomic", broken)
    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=2, warmup=1, active=2, every=0)
    with pytest.raises(torch.OutOfMemoryError) as info:
        fit(prof, tmp_path, max_steps=20, model=RunsOutOfMemory())
    assert info.value is RunsOutOfMemory.raised
    assert not list((tmp_path / "t").rglob("*.out_of_memory.txt"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("memory_snapshot", [False, True], ids=["light-record", "in-a-window"])
def test_a_real_out_of_memory_writes_the_allocators_numbers_and_snapshot(tmp_path, memory_snapshot):
    """With the light record (``oom_stacks=True``) and in a window with the full history, the report names this
    file's line."""
    from lightning.pytorch.demos.boring_classes import BoringModel

    class Greedy(BoringModel):
        def training_step(self, batch, batch_idx):
            if batch_idx == OOM_AT:
                free, _ = torch.cuda.mem_get_info()
                self.hog = torch.empty(free // 2, dtype=torch.uint8, device=self.device)  # half, then too much
                torch.empty(free, dtype=torch.uint8, device=self.device)
            return super().training_step(batch, batch_idx)

    prof = StreamProfiler(dirpath=tmp_path / "t", skip_first=3, warmup=1, active=5, every=0, oom_stacks=True,
                          memory_snapshot=memory_snapshot, max_overhead=None)
    greedy = Greedy()
    with pytest.raises(torch.OutOfMemoryError):
        fit(prof, tmp_path, max_steps=20, accelerator="gpu", model=greedy)
    greedy.hog = None  # the half of the device it holds goes back
    torch.cuda.empty_cache()
    (report,) = list((tmp_path / "t").rglob("rank0.out_of_memory.txt"))
    first, _, summary = report.read_text().partition("\n\n")
    assert first.startswith(f"out of memory at step {OOM_AT}:") and "GiB allocated" in first
    assert "largest live allocations: " in first and f"{os.path.basename(__file__)}:" in first, first
    assert "; Python holds parameters " in first and "largest other tensors: " in first and " uint8[" in first
    assert "PyTorch CUDA memory summary" in summary
    (snap,) = list((tmp_path / "t").rglob("rank0.out_of_memory.memory_snapshot.pickle"))
    data = pickle.loads(snap.read_bytes())
    assert any(b.get("frames") for seg in data["segments"] for b in seg["blocks"])
    history = [e for e in data["device_traces"][0] if e["action"] != "oom"] if data["device_traces"] else []
    assert bool(history) == memory_snapshot  # the history of allocs and frees in a window only
    enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    fit(prof, tmp_path, max_steps=8, accelerator="gpu")  # a fit that ends well turns the record off
    assert enabled is None or not enabled()