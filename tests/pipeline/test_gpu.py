import lightning as L
import pytest
import torch
from pipeline_models import Net, loader
from test_equivalence import CASES, run
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_streamprof import StreamPipeline

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("depth", [1, 3], ids=["depth1", "depth3"])
@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "thread"])
@pytest.mark.parametrize("case", list(CASES))
def test_pipelined_equals_serial_on_cuda(case, threaded, depth):
    kwargs = dict(CASES[case])
    serial, t_serial = run(None, accelerator="gpu", **kwargs)
    piped, t_piped = run("on", accelerator="gpu", callback_kwargs=dict(backbone="backbone", staging_thread=threaded,
                                                                       depth=depth), **kwargs)
    assert piped.seen == serial.seen
    assert piped.losses == pytest.approx(serial.losses, rel=1e-5, abs=1e-6)
    for a, b in zip(piped.head.parameters(), serial.head.parameters()):
        torch.testing.assert_close(a, b)
    assert t_piped.global_step == t_serial.global_step
    assert t_piped.callbacks[0]._fit.stager.cuda and t_piped.callbacks[0].staged_batches > 0


class Tracker(L.Callback):
    def __init__(self):
        self.allocated = []

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step % 100 == 0:
            torch.cuda.synchronize()
            self.allocated.append(torch.cuda.memory_allocated())


class ToFloat(nn.Module):
    def forward(self, x):
        return x.float() / 255


class Resident(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(ToFloat(), nn.Conv2d(3, 16, 3, padding=1), nn.ReLU()).requires_grad_(False).eval()
        self.head = nn.Conv2d(16, 4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.head(self.backbone(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.head.parameters(), lr=0.01)


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "thread"])
def test_memory_flat_over_2000_pipelined_steps(threaded):
    """Eager staging: every staged batch's memory is freed (``record_stream`` leaks nothing)."""
    x = torch.randint(0, 255, (64, 3, 64, 64), dtype=torch.uint8)
    y = torch.randint(0, 4, (64, 64, 64))
    tracker = Tracker()
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=2000, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[StreamPipeline(mode="on", backbone="backbone", staging_thread=threaded,
                                                  cuda_graph=False), tracker])
    trainer.fit(Resident(), DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, pin_memory=True))
    steady = tracker.allocated[2:]
    batch_bytes = 8 * 3 * 64 * 64 + 8 * 64 * 64 * 8 + 8 * 16 * 64 * 64 * 4  # images, labels, backbone output
    assert max(steady) - min(steady) <= 2 * batch_bytes  # no growth: no leak through record_stream
    pipe = trainer.callbacks[0]
    assert pipe.staged_batches >= 1990 and pipe.staged_calls[0].hits >= 1990


def test_memory_does_not_grow_over_2000_steps_with_the_graph():
    """The graph way (``mode="on"``): the graph's pool is a fixed cost; the replays' outputs, handed over with
    ``record_stream``, are freed as the allocator processes the training stream's events, so the samples swing
    but do not grow."""
    x = torch.randint(0, 255, (64, 3, 64, 64), dtype=torch.uint8)
    y = torch.randint(0, 4, (64, 64, 64))
    tracker = Tracker()
    pipe = StreamPipeline(mode="on", backbone="backbone")
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=2000, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[pipe, tracker])
    trainer.fit(Resident(), DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, pin_memory=True))
    steady = tracker.allocated[2:]
    third = len(steady) // 3
    batch_bytes = 8 * 3 * 64 * 64 + 8 * 64 * 64 * 8 + 8 * 16 * 64 * 64 * 4
    assert max(steady[-third:]) <= max(steady[:third]) + 2 * batch_bytes, steady
    assert pipe._fit.calls.program.graph.replays >= 1990 and pipe.staged_calls[0].hits >= 1990


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "thread"])
@pytest.mark.parametrize("case", ["sized", "iterable_limited", "validation_interleaved"])
def test_cuda_graph_backbone_equals_serial(case, threaded):
    kwargs = dict(CASES[case])
    serial, _ = run(None, accelerator="gpu", **kwargs)
    piped, trainer = run("on", accelerator="gpu", callback_kwargs=dict(backbone="backbone", cuda_graph=True,
                                                                       staging_thread=threaded), **kwargs)
    assert piped.seen == serial.seen
    assert piped.losses == pytest.approx(serial.losses, rel=1e-5, abs=1e-6)
    graphed = trainer.callbacks[0]._fit.calls.program.graph
    assert graphed is not None and graphed.replays > 0


def test_auto_measures_serial_inline_thread_and_graph_and_equals_serial():
    serial, _ = run(None, accelerator="gpu", max_epochs=20)  # 240 steps: the first round's two comparisons
    piped, trainer = run("auto", accelerator="gpu", max_epochs=20,
                         callback_kwargs=dict(backbone="backbone", warmup=2, trial=4, recheck=1000))
    pipe = trainer.callbacks[0]
    auto = pipe._fit.steering.auto
    assert {w.key for w in auto.ways} == {"serial", "inline", "thread+graph"}
    assert {w.key for w in auto.history[0].ms} >= {"serial", "thread+graph"}  # inline when the graph lost
    report = pipe.report()  # serial timed beside the way in force, the base of the blocks
    assert "paired blocks" in report and "serial: " in report and "x the speed of pipelined" in report
    graphed = pipe._fit.calls.program.graph
    assert graphed.replays > 0  # the graph's trials replayed it
    assert graphed.eager == 0  # captured at the end of the first step: its first trial step already replays
    if not pipe._fit.steering.auto.choice.graph:
        assert not graphed._graphs  # released when auto chose a way without it
    assert piped.seen == serial.seen
    assert piped.losses == pytest.approx(serial.losses, rel=1e-5, abs=1e-6)


class EveryStep(L.Callback):
    def __init__(self):
        self.allocated = []

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step > 20:
            torch.cuda.synchronize()
            self.allocated.append(torch.cuda.memory_allocated())


def _steady_allocated(callbacks):
    x = torch.randint(0, 255, (64, 3, 64, 64), dtype=torch.uint8)
    y = torch.randint(0, 4, (64, 64, 64))
    tracker = EveryStep()
    trainer = L.Trainer(accelerator="gpu", devices=1, max_steps=200, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks + [tracker])
    trainer.fit(Resident(), DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, pin_memory=True))
    return max(tracker.allocated)


@pytest.mark.parametrize("depth", [1, 3])
def test_extra_memory_is_bounded_by_the_staging_depth(depth):
    batch_bytes = 8 * 3 * 64 * 64 + 8 * 64 * 64 * 8 + 8 * 16 * 64 * 64 * 4  # images, labels, backbone output
    serial = _steady_allocated([])
    piped = _steady_allocated([StreamPipeline(mode="on", backbone="backbone", depth=depth, cuda_graph=False)])
    assert piped - serial <= (depth + 1) * batch_bytes


def test_auto_without_a_backbone_does_not_try_a_graph():
    piped, trainer = run("auto", accelerator="gpu", max_epochs=20,
                         callback_kwargs=dict(backbone=False, warmup=2, trial=4, recheck=1000))
    auto = trainer.callbacks[0]._fit.steering.auto
    assert {w.key for w in auto.ways} == {"serial", "inline", "thread"} and auto.history


def test_a_forward_that_cannot_be_captured_runs_eagerly_with_one_warning():
    from lightning_streamprof.pipeline.graph import GraphedForward

    weight = torch.randn(16, 16, device="cuda")

    def forward(x):
        scale = float(x.abs().max().item())  # a host synchronisation: not capturable
        return (x @ weight) / scale

    graphed = GraphedForward(forward)
    x = torch.randn(8, 16, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side), pytest.warns(UserWarning, match="cannot be captured"):
        out = graphed(x)
    with torch.cuda.stream(side):
        again = graphed(x)  # eager, no second warning
    torch.cuda.synchronize()
    assert graphed.failure is not None and graphed.replays == 0 and graphed.eager == 2
    torch.testing.assert_close(out, forward(x))
    torch.testing.assert_close(again, out)
    assert not torch.cuda.is_current_stream_capturing()
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    assert torch.rand(1000, device="cuda").mean().item() == pytest.approx(0.5, abs=0.1)  # the generator works


def test_graph_under_autocast_equals_eager():
    """bf16 and fp16 autocast: the backbone is captured with autocast active (cast cache off) and its replay
    equals the eager forward under autocast."""
    from lightning_streamprof.pipeline.graph import GraphedForward

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 8, 3)).cuda().eval()
    graphed = GraphedForward(net.forward)
    side = torch.cuda.Stream()
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(4, 3, 32, 32, device="cuda")
        with torch.cuda.stream(side), torch.autocast("cuda", dtype=dtype):
            first = graphed(x)
            again = graphed(x + 1)
            with torch.no_grad():
                eager, eager_again = net(x), net(x + 1)
        torch.cuda.synchronize()
        assert first.dtype == eager.dtype == dtype
        torch.testing.assert_close(first, eager)
        torch.testing.assert_close(again, eager_again)
    assert graphed.failure is None and graphed.replays == 4 and len(graphed._graphs) == 2


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_article_style_conversion_in_the_step_is_staged_and_graphed_on_cuda(precision):
    from test_derived_input import StepConverts, fit

    serial, _ = fit(StepConverts("normalize"), None, accelerator="gpu", precision=precision)
    piped, pipe = fit(StepConverts("normalize"), dict(mode="on", cuda_graph=True), accelerator="gpu",
                      precision=precision)
    assert pipe.staged_calls[0].hits == pipe.staged_batches - 1 > 0
    assert pipe._fit.calls.program.graph.replays > 0 and pipe._fit.calls.program.graph.failure is None
    assert piped.losses == pytest.approx(serial.losses, rel=1e-3, abs=1e-4)
