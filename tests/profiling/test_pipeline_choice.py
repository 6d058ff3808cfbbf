"""The profiler beside a staging callback that chooses its way (StreamPipeline's ``auto``): the first window waits for
the choice (bounded), every window records the way it ran in its trace and says so, and the recommendations read the
callback's own state, not only what a window saw."""

from __future__ import annotations

import html
import time

import lightning as L
import msgspec
import pytest
from helpers import TinyModel, fit
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from traces_on_disk import load_trace, step_numbers, trace_files
from tracebuilder import TraceBuilder

from lightning_streamprof import StreamProfiler, analyze
from lightning_streamprof.analysis import analyze_table
from lightning_streamprof.analysis.rules import stream_pipeline
from lightning_streamprof.pipeline.state import PipelineState
from lightning_streamprof.pipeline.way import INLINE, SERIAL, THREAD, Way
from lightning_streamprof.profiling.pipeline_view import pipeline_run
from lightning_streamprof.profiling.schedule import CHOICE_WAIT
from lightning_streamprof.results import GpuMetrics, PipelineRun

GRAPHED = Way(staged=True, thread=True, graph=True)


class Choosing(L.Callback):
    """A staging callback that says what it does through ``state`` as StreamPipeline does: it is choosing (``deciding``,
    in trials from its third step, the way alternating serial / pipelined step by step) until ``decide_at`` steps
    have run (``None``: never), then runs ``chosen``; ``trials`` (start, stop): steps of a later recheck."""

    stages_on_thread = False

    def __init__(self, decide_at: int | None, chosen: Way = GRAPHED, mode: str = "auto",
                 trials: tuple[int, int] | None = None) -> None:
        self.decide_at, self.chosen, self.mode, self.trials = decide_at, chosen, mode, trials
        self.done = 0  # training steps done
        self.reads: list[int] = []  # the steps done at each read of the state

    def on_train_batch_end(self, *args) -> None:
        self.done += 1

    def report(self) -> str:
        return "Choosing: a test's staging callback"

    @property
    def state(self) -> PipelineState:
        self.reads.append(self.done)
        deciding = self.mode == "auto" and (self.decide_at is None or self.done < self.decide_at)
        rechecking = self.trials is not None and self.trials[0] <= self.done < self.trials[1]
        in_trials = (deciding and self.done >= 3) or rechecking
        way = (INLINE if self.done % 2 else SERIAL) if in_trials else SERIAL if deciding else self.chosen
        return PipelineState(self.mode, way, deciding=deciding, in_trials=in_trials,
                             graphed=self.chosen.graph and not deciding, staged_calls=1)


class SlowHook(TinyModel):
    """``on_after_batch_transfer`` takes most of each step: work StreamPipeline could stage ahead."""

    def on_after_batch_transfer(self, batch, dataloader_idx):
        time.sleep(0.004)
        return batch


def _profiler(tmp_path, **kwargs):
    kwargs = {"skip_first": 4, "warmup": 1, "active": 2, "every": 0, "max_overhead": None, **kwargs}
    return StreamProfiler(dirpath=str(tmp_path / "traces"), **kwargs)


def test_the_first_window_waits_for_the_choice_and_records_the_chosen_way(tmp_path):
    """Scheduled to record steps 5-6, the window waits while the callback is deciding (26 steps): it warms up at
    the step the choice came (30) and records 31-32, on the chosen way; the wait is one line of the summary, the way
    is in the trace's metadata and in the summary."""
    choosing = Choosing(decide_at=30)
    prof = _profiler(tmp_path)
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    fit(prof, tmp_path, max_steps=40, callbacks=[choosing], logger=logger)
    (window,) = prof.windows
    assert (window.first_step, window.last_step) == (31, 32)
    (path,) = trace_files(tmp_path / "traces")
    trace = load_trace(path)
    assert step_numbers(trace) == [31, 32]
    recorded = trace["streamprof"]["pipeline"]
    assert recorded["first"]["way"] == GRAPHED.label and recorded["first"]["deciding"] is False
    assert recorded["ways"] == [GRAPHED.label] and recorded["in_trials"] is False
    assert window.pipeline is not None and window.pipeline.ways == [GRAPHED.label]
    summary = prof.summary()
    assert "window 0 waited 26 steps for Choosing's choice of way (steps 5 -> 31)" in summary
    assert f"window 0: Choosing (mode=auto) ran {GRAPHED.label}" in summary
    assert "recorded during" not in summary
    report = html.unescape((next((tmp_path / "traces").glob("fit-*")) / "report.html").read_text())
    assert "window 0 waited 26 steps for Choosing's choice of way (steps 5 -> 31)" in report
    events = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0})
    events.Reload()
    (text,) = [t.tensor_proto.string_val[0].decode() for t in events.Tensors("streamprof/summary/text_summary")]
    assert "*Note: window 0 waited 26 steps for Choosing's choice of way \\(steps 5 \\-&gt; 31\\).*" in text
    assert "ran pipelined on a staging thread, backbone as a CUDA graph" in text


def test_a_choice_that_does_not_come_holds_the_window_no_longer_than_the_bound(tmp_path):
    """Deciding for the whole run: the window records CHOICE_WAIT steps after its scheduled start, and says that it
    recorded before the choice, during the trials, with the ways it recorded."""
    choosing = Choosing(decide_at=None)
    prof = _profiler(tmp_path)
    fit(prof, tmp_path, max_steps=5 + CHOICE_WAIT + 10, callbacks=[choosing])
    (window,) = prof.windows
    assert window.first_step == 5 + CHOICE_WAIT
    summary = prof.summary()
    assert (f"window 0 did not wait longer than {CHOICE_WAIT} steps for Choosing's choice of way (steps 5 -> "
            f"{5 + CHOICE_WAIT}): it recorded before the choice") in summary
    recorded = load_trace(trace_files(tmp_path / "traces")[0])["streamprof"]["pipeline"]
    assert recorded["in_trials"] is True and recorded["first"]["deciding"] is True
    assert sorted(recorded["ways"]) == sorted([SERIAL.label, INLINE.label])  # written again at the window's end
    assert ("window 0 recorded during Choosing's trials (mode=auto; the way changes from block to block, so these "
            f"steps need not run the way the run settles on): {', '.join(recorded['ways'])}") in summary


def test_no_wait_without_a_choice_to_wait_for(tmp_path):
    """A callback that is not deciding (mode "on", CPU's auto) holds nothing: the window records where the schedule
    put it. The state is read at the window's due step (4) and its recorded steps (5, 6), once more when the
    window's analysis is logged (whenever the worker finishes it), then at the stage's end: not at every step."""
    choosing = Choosing(decide_at=0, chosen=INLINE, mode="on")
    prof = _profiler(tmp_path)
    fit(prof, tmp_path, max_steps=30, callbacks=[choosing])
    (window,) = prof.windows
    assert window.first_step == 5
    assert "waited" not in prof.summary() and "wait longer" not in prof.summary()
    during = [done for done in choosing.reads if done < 30]
    assert during[:3] == [4, 5, 6] and len(during) <= 4


def test_a_window_in_a_recheck_says_so_and_the_advice_follows_the_pipelines_state(tmp_path):
    """The window falls in a recheck (auto timing serial against pipelined, step by step): it says which ways it
    recorded. Its steps spend most of their time in on_after_batch_transfer, staged by nothing in the trace, yet
    the run's callback stages batches at the end: StreamPipeline is not advised, in the summary or the report."""
    choosing = Choosing(decide_at=0, chosen=THREAD, trials=(4, 12))
    prof = _profiler(tmp_path)
    fit(prof, tmp_path, max_steps=20, model=SlowHook(), callbacks=[choosing])
    (window,) = prof.windows
    assert window.pipeline is not None and window.pipeline.in_trials
    summary = prof.summary()
    assert "window 0 recorded during Choosing's trials" in summary
    assert f"{SERIAL.label}, {INLINE.label}" in summary or f"{INLINE.label}, {SERIAL.label}" in summary
    assert "stream_pipeline" not in summary and "StreamPipeline can run it" not in summary
    report = html.unescape((next((tmp_path / "traces").glob("fit-*")) / "report.html").read_text())
    assert "window 0 recorded during Choosing's trials" in report
    assert "StreamPipeline can run it" not in report and "(recorded during auto's trials)" in report
    # post hoc, the trace's metadata says the window was in trials: the analysis does not advise what it chose either
    posthoc = analyze(str(tmp_path / "traces"))
    assert posthoc.traces[0].pipeline == window.pipeline
    assert not [r for r in posthoc.recommendations if r.id == "stream_pipeline"]


@pytest.mark.parametrize("callbacks, expected", [
    ([], "lightning_streamprof.StreamPipeline can run it"),
    ([Choosing(decide_at=0, chosen=SERIAL, mode="off")], 'StreamPipeline is off in this run (mode="off")'),
    ([Choosing(decide_at=3, chosen=SERIAL)], "StreamPipeline (auto) runs it in the step, serially"),
], ids=["no pipeline", "off", "auto chose serial"])
def test_a_run_that_does_not_stage_its_hook_is_told(tmp_path, callbacks, expected):
    """The same slow hook: advised to a run without a staging callback, or whose callback does not stage, each in
    the words that fit what the callback does; only where the traces hold a GPU's work (this CPU run's, given a
    GPU's metrics): staging ahead needs a CUDA device, so the CPU run itself is advised nothing of the kind."""
    prof = _profiler(tmp_path)
    fit(prof, tmp_path, max_steps=20, model=SlowHook(), callbacks=callbacks)
    assert "[stream_pipeline]" not in prof.summary() and "CUDA stream" not in prof.summary()
    (window,) = prof.windows
    gpu = GpuMetrics(device=0, utilization=0.2, sm_efficiency=None, achieved_occupancy=None, kernel_ns=1, span_ns=5)
    on_a_gpu = msgspec.structs.replace(window.analysis, gpu=[gpu])
    state = pipeline_run(callbacks[0]) if callbacks else None
    (advice,) = stream_pipeline(on_a_gpu, state)
    assert expected in advice.message


def test_a_staging_run_is_not_advised_to_stage(tmp_path):
    prof = _profiler(tmp_path)
    fit(prof, tmp_path, max_steps=20, model=SlowHook(), callbacks=[Choosing(decide_at=0, chosen=INLINE, mode="on")])
    summary = prof.summary()
    assert "[stream_pipeline]" not in summary and "window 0: Choosing (mode=on) ran pipelined" in summary


def _launch_bound():
    """A 100 µs step whose training thread launches 20 short kernels (host_bound)."""
    b = TraceBuilder()
    b.device_properties({"id": 0, "totalGlobalMem": 10**12, "numSms": 100, "computeMajor": 9})
    b.step(1, 0, 100)
    conv = b.op("aten::conv2d", 2, 90)
    for i in range(20):
        b.launch("conv_kernel", 3 + 4 * i, 5 + 4 * i, 1, conv)
    return analyze_table(b.table())


def _host_bound(pipeline):
    from lightning_streamprof.analysis.rules import recommend

    (rec,) = [r for r in recommend(_launch_bound(), pipeline=pipeline) if r.id == "host_bound"]
    return rec.message


def test_host_bound_advice_reads_the_pipelines_state():
    """The advice of the 3000-step run: a window without graph launches, on a run whose pipeline replays the
    backbone as a CUDA graph on its staging thread. Neither the graph nor the thread is advised; the trained part
    is named. A run without StreamPipeline is advised both."""
    plain = _host_bound(None)
    assert "StreamPipeline(cuda_graph=True)" in plain and "StreamPipeline's staging thread" in plain
    graphed = _host_bound(PipelineRun(mode="auto", way=GRAPHED.label, staged=True, thread=True, graph=True,
                                      graphed=True, staged_calls=1))
    assert "cuda_graph=True" not in graphed and "staging thread to take" not in graphed
    assert ("StreamPipeline already replays the frozen backbone as a CUDA graph on its staging thread, so the "
            "remaining launches are in the trained part") in graphed
    threaded = _host_bound(PipelineRun(mode="auto", way=THREAD.label, staged=True, thread=True))
    assert "cuda_graph=True" not in threaded and "staging thread" not in threaded
    assert 'torch.compile(mode="reduce-overhead")' in threaded
    off = _host_bound(PipelineRun(mode="off"))
    assert 'StreamPipeline(mode="auto") (off in this run)' in off


def test_streampipeline_itself_is_read(tmp_path):
    """StreamPipeline's own state through the same path: on CPU, mode "on" stages in order (no choice to wait for),
    and the window and the report name its way."""
    from lightning_streamprof import StreamPipeline

    pipe = StreamPipeline(mode="on")
    prof = _profiler(tmp_path)
    fit(prof, tmp_path, max_steps=20, model=SlowHook(), callbacks=[pipe])
    assert not pipe.state.deciding and pipe.state.pipelined
    (window,) = prof.windows
    assert window.first_step == 5 and window.pipeline is not None
    assert window.pipeline.first.way == pipe.state.way.label and window.pipeline.first.staged
    summary = prof.summary()
    assert f"window 0: StreamPipeline (mode=on) ran {pipe.state.way.label}" in summary
    assert "[stream_pipeline]" not in summary
