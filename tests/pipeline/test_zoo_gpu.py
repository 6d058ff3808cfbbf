"""The model zoo on a GPU: ``StreamPipeline()`` with no arguments stages every frozen call of each model;
``mode="on"`` replays the staged calls as a CUDA graph (a compiled backbone included) and equals serial training."""

from __future__ import annotations

import pytest
import torch
from test_zoo import CASES, STEPS, fit
from zoo_models import CompiledBackbone

from lightning_streamprof import StreamPipeline

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def deterministic_convolutions():
    """cuDNN's default backward algorithms add in any order: two serial runs of a trainable CNN differ."""
    before = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before
GPU_CASES = {**{k: v for k, v in CASES.items() if k != "compiled_torchvision"},
             "compiled_torchvision_inductor": (lambda: CompiledBackbone("inductor"), ["backbone.forward"], {})}


def assert_close_training(piped, serial) -> None:
    torch.testing.assert_close(torch.tensor(piped.losses), torch.tensor(serial.losses), rtol=1e-3, atol=1e-4)
    for a, b in zip(piped.trainable(), serial.trainable()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("case", list(GPU_CASES))
def test_zoo_model_on_cuda_is_staged_and_graphed_and_equals_serial(case):
    make, labels, kwargs = GPU_CASES[case]
    torch.manual_seed(7)
    serial = fit(make(), None, accelerator="gpu", **kwargs)
    torch.manual_seed(7)
    again = fit(make(), None, accelerator="gpu", **kwargs)
    assert_close_training(again, serial)  # serial training repeats itself: a difference below is the pipeline's
    pipe = StreamPipeline(mode="on")
    torch.manual_seed(7)
    piped = fit(make(), pipe, accelerator="gpu", **kwargs)
    assert_close_training(piped, serial)
    assert [c.label for c in pipe.staged_calls] == labels
    for call in pipe.staged_calls:
        assert call.hits == STEPS - 1 and call.mismatch is None, pipe.report()
    graph = pipe._fit.calls.program.graph if labels else None
    if labels:
        assert graph is not None and (graph.replays > 0 or graph.failure), pipe.report()
        assert "the staged calls replay a CUDA graph" in pipe.report() or "run eagerly:" in pipe.report()
        print(case, pipe.report())


@pytest.mark.parametrize("case", ["timm_vit_features", "latent_diffusion", "clip_towers_keywords"])
def test_zoo_model_with_auto_and_no_arguments(case):
    make, labels, kwargs = GPU_CASES[case]
    pipe = StreamPipeline(warmup=2, trial=3, recheck=1000)
    fit(make(), pipe, accelerator="gpu", steps=180, **kwargs)  # the first round: two comparisons of 39-75 steps
    assert [c.label for c in pipe.staged_calls] == labels
    assert pipe.rounds, pipe.report()
    assert {w.key for w in pipe.rounds[0].ms} >= {"serial", "thread+graph"}
    assert pipe._fit.calls.program.graph.eager == 0  # captured at the first step: no eager run on the staging thread
