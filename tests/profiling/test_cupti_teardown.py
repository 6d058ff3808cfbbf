"""Kineto detaches CUPTI after each window that recorded the device (``TEARDOWN_CUPTI=1``) where that is safe, so
that the kernel launches of the run between windows do not pay CUPTI's callbacks; where it is not, one line says so."""

import pytest
import torch

from lightning_streamprof.profiling import session
from lightning_streamprof.profiling.session import cupti_teardown_note, release_cupti_after_windows

CPU, CUDA = torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    return monkeypatch


@pytest.mark.parametrize(("cuda", "expected"), [("13.0", "1"), ("12.6", "1"), ("12.4", None), ("11.8", None)])
def test_teardown_is_asked_for_on_cuda_from_12_6(env, cuda, expected):
    env.setattr(session.torch.version, "cuda", cuda)
    release_cupti_after_windows([CPU, CUDA])
    assert session.os.environ.get("TEARDOWN_CUPTI") == expected
    note = cupti_teardown_note()
    if expected:
        assert note is None
    else:
        assert f"CUDA {cuda} cannot detach CUPTI safely" in note and "TEARDOWN_CUPTI=1" in note


def test_a_setting_of_the_environment_is_kept_and_named(env):
    env.setenv("TEARDOWN_CUPTI", "0")
    env.setattr(session.torch.version, "cuda", "13.0")
    release_cupti_after_windows([CPU, CUDA])
    assert session.os.environ["TEARDOWN_CUPTI"] == "0"
    assert cupti_teardown_note().startswith("TEARDOWN_CUPTI=0 keeps CUPTI attached after the first window")


def test_a_build_without_cuda_has_no_cupti_to_detach_and_nothing_to_say(env):
    env.setattr(session.torch.version, "cuda", None)  # CPU-only or ROCm builds
    release_cupti_after_windows([CPU, CUDA])
    assert "TEARDOWN_CUPTI" not in session.os.environ and cupti_teardown_note() is None


def test_a_window_without_the_device_leaves_the_environment_alone(env):
    env.setattr(session.torch.version, "cuda", "13.0")
    release_cupti_after_windows([CPU])
    assert "TEARDOWN_CUPTI" not in session.os.environ


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_window_asks_kineto_to_detach_cupti(env, tmp_path):
    from helpers import fit

    from lightning_streamprof import StreamProfiler

    profiler = StreamProfiler(dirpath=str(tmp_path), skip_first=2, warmup=1, active=2)
    fit(profiler, tmp_path, max_steps=12, accelerator="gpu")
    expected = "1" if tuple(int(p) for p in torch.version.cuda.split(".")[:2]) >= (12, 6) else None
    assert session.os.environ.get("TEARDOWN_CUPTI") == expected
    assert profiler.windows


def test_a_run_where_cupti_stays_attached_says_so_once_and_in_its_report(env, tmp_path):
    """On CUDA before 12.6 (here: pretended) the first window that records the device warns once, and the HTML
    report carries the same note."""
    from helpers import fit

    from lightning_streamprof import StreamProfiler
    from lightning_streamprof.profiling import window_sessions as sessions_module

    class DeviceSession(sessions_module.KinetoSession):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.records_device = True  # as a CUDA window's session is (the trace itself is a CPU one here)

    env.setattr(sessions_module, "KinetoSession", DeviceSession)
    env.setattr(session.torch.version, "cuda", "12.4")

    profiler = StreamProfiler(dirpath=str(tmp_path), skip_first=2, warmup=1, active=2, every=4, repeat=2,
                              max_overhead=None)
    with pytest.warns(UserWarning, match="CUDA 12.4 cannot detach CUPTI safely") as caught:
        fit(profiler, tmp_path, max_steps=14)
    assert sum("cannot detach CUPTI" in str(w.message) for w in caught) == 1  # two windows, one warning
    assert "TEARDOWN_CUPTI" not in session.os.environ
    report = (next(tmp_path.glob("fit-*")) / "report.html").read_text()
    assert "CUDA 12.4 cannot detach CUPTI safely" in report
