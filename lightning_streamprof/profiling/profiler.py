"""StreamProfiler: Lightning's ``Profiler`` interface over sampled Kineto windows.

The class holds Lightning's hooks and forwards them to the stage they belong to (:class:`.stage.ProfiledStage`,
built whole at each stage's setup). Where windows fall and what they may cost is :mod:`.schedule`; how a stage
steps through them :mod:`.recorder`; each window's Kineto session :mod:`.session` and :mod:`.window_sessions`; the
export and analysis of its trace :mod:`.exporter` and :mod:`.worker`; what is logged and shown :mod:`.loggers` and
:mod:`.run_report`; which of Lightning's actions need a hook outside a window :mod:`.actions`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Sequence
from typing import Any, Literal

from lightning.pytorch.profilers import Profiler
from typing_extensions import override

from lightning_streamprof.analysis.scoring import THRESHOLD
from lightning_streamprof.pipeline import lightning_api
from lightning_streamprof.profiling.actions import ActionScope
from lightning_streamprof.profiling.exporter import WindowResult
from lightning_streamprof.profiling.lightning_cli import register as register_cli_errors
from lightning_streamprof.profiling.on_demand import POLL_SECONDS, SIGNAL
from lightning_streamprof.profiling.run_report import append_summary
from lightning_streamprof.profiling.schedule import ACTIVE, SKIP_FIRST, WARMUP
from lightning_streamprof.profiling.session import Activity
from lightning_streamprof.profiling.settings import checked_settings
from lightning_streamprof.profiling.stage import NO_STAGE, NoStage, ProfiledStage
from lightning_streamprof.profiling.step_watch import WatchSettings
from lightning_streamprof.profiling.storage import join_path
from lightning_streamprof.profiling.window_sessions import SessionMaker
from lightning_streamprof.results import DistributedStats, ProfilingCost


WATCH = WatchSettings()


class StreamProfiler(Profiler):
    r"""Records Kineto (``torch.profiler``) traces in sampled windows across the whole run and analyses them off the
    training thread, within a budget of the training time.

    Between windows the profiler only counts and times steps (the step-time watch: a slowdown that stays records a
    window at once, ``slowdown``), and a window can be asked for while the job runs (``on_request``). A window warms
    up for ``warmup`` steps, then records ``active`` steps: one ``ProfilerStep#N`` range per batch (``N`` the global
    batch index) and Lightning's actions as ``[pl][profile]<action>`` ranges. Background threads write its trace as
    ``<dirpath>/<stage>-<time>/w<window>-step<first step>/rank<global rank>.<ns>.pt.trace.json.gz`` (it opens in
    Perfetto, torch-tb-profiler and HTA) and a worker process analyses it. Each window's cost is measured, and
    windows wait while the cost would go over ``max_overhead`` (:class:`~.schedule.OverheadBudget`). A window due
    while :class:`~lightning_streamprof.StreamPipeline`'s ``auto`` has not made its first choice of way waits for it (at
    most :data:`~.schedule.CHOICE_WAIT` steps), so that it records the way the run settles on; every window records
    the way StreamPipeline ran its steps, and the recommendations read what StreamPipeline does. At the end of
    a stage :meth:`summary` gives the last windows' numbers and what profiling cost, and global rank 0 writes
    ``report.html`` in the run's directory. Faults never stop training: an exception in a window writes the window,
    cut short; a trace store that fails or an analysis that fails is a warning.

    With ``analyze=True`` it logs through the Trainer's loggers, at each analysed window's global step:

    - ``streamprof/gpu_utilization``, ``streamprof/sm_efficiency``, ``streamprof/achieved_occupancy``: fractions of
      the window's step span (``/cuda:<d>`` appended when a trace has several devices);
    - ``streamprof/step_ms``, ``streamprof/step_ms/<category>``: the mean step and its breakdown, in ms;
    - ``streamprof/overhead``: what profiling has cost so far, as a fraction of the training time (also at the end);
    - on rank 0 of a multi-rank run: ``streamprof/rank<R>/step_ms``, ``/sync_ms``, ``/transfer_ms`` and
      ``/relative_score`` per rank, ``streamprof/straggler_score`` (the lowest relative score),
      ``streamprof/stragglers`` and ``streamprof/missing_ranks`` (counts); a straggler is also named in a warning;
    - with a ``TensorBoardLogger``: each window's summary as markdown under the text tag ``streamprof/summary``.

    Args:
        dirpath: Directory or fsspec URL (``s3://``, ``gs://``, ``memory://``...) for the traces.
            Default: ``<trainer.log_dir>/streamprof``.
        filename: If set, :meth:`summary` is also appended to ``<dirpath>/<stage>-<filename>.txt``.
        skip_first: Steps never profiled at the start of a stage.
        warmup: Steps profiled but not recorded before each window (CUPTI's start-up).
        active: Steps recorded per window.
        every: Steps between window starts; ``0`` records one window; ``None`` places them as often as
            ``max_overhead`` allows.
        repeat: The most windows, ``0`` for no limit.
        max_overhead: The profiler's share of the training time (``0.01``: 1%), or ``None`` for no budget.
            ``"auto"``: :data:`~.settings.AUTO_OVERHEAD`, :data:`~.settings.DETAILED_OVERHEAD` with one of
            :data:`~.settings.DETAILED_OPTIONS`.
        record_shapes: Record operators' input shapes.
        profile_memory: Record allocations and frees (the memory view).
        with_stack: Record Python source locations (hot source lines; the costliest option).
        with_flops: Estimate the FLOPs of matrix products and convolutions.
        activities: ``"cpu"`` and ``"cuda"``, or one of them; default CPU, and CUDA where available.
        compress_level: ISA-L gzip level of the traces (0 fastest .. 3 smallest).
        row_limit: Operators per window in :meth:`summary`.
        analyze: Analyse each window in a worker process and log its numbers (above).
        all_threads: Record every thread's operators, not only the training loop's. ``None``: when a callback
            stages batches on a thread of its own (:class:`~lightning_streamprof.StreamPipeline`).
        straggler_threshold: A rank whose relative score (the fastest rank's median step outside waiting for the
            others over its own) is below this is a straggler.
        gather_after: Steps after a window at which the ranks' summaries are gathered to rank 0; ``None``: at the
            next window's first recorded step or the end of the stage.
        gather_timeout: Seconds rank 0 waits at a gather (each host's local rank 0 half of it).
        timeout: Seconds the profiler waits at most: for the trace directory, a trace's write, and pending exports
            at the end of a stage or at exit.
        slowdown: The step-time watch (:mod:`.step_watch`): when the median of the last ``slowdown_steps`` steps
            is at least this many times the run's baseline, a window is recorded at once, whatever the schedule (it
            takes the next scheduled window's place, within ``max_overhead``), and its report compares it with the
            last normal window. ``False``: no watch. Validation, checkpoints, StreamPipeline's trials and the
            profiler's own windows are left out of the step times.
        slowdown_steps: The recent steps whose median the watch compares with the baseline.
        stall_factor: A single step at least this many times the baseline is listed as a stall in the summary.
        on_request: Windows on request (:mod:`.on_demand`): ``streamprof record RUN_DIR`` (a marker file in
            ``dirpath`` or the run's directory, looked for on global rank 0 every ``request_poll`` seconds and every
            100 steps, whichever is rarer) or ``request_signal`` sent to the process starts a window at once; its
            report says it was recorded on request.
        request_poll: Seconds between two looks for the marker.
        request_signal: The signal that asks for a window (name or number; not ``SIGUSR1``, SLURM's requeue), handled
            on the main thread, the earlier handler restored at the end of the stage; ``None``: no signal.
        memory_snapshot: Record the CUDA caching allocator's history with Python stacks over each window's steps and
            write it beside the trace as ``rank<R>.memory_snapshot.pickle`` (pytorch.org/memory_viz opens it); the
            HTML report's Memory section draws its allocated and reserved curve and lists the largest live
            allocations at the peak by line (:mod:`.memory_snapshot`). Whatever this is, an out-of-memory error in a
            training step writes ``rank<R>.out_of_memory.txt`` in the run's directory, with the snapshot when the
            allocator kept stacks (:mod:`.out_of_memory`), and goes on unchanged.
        oom_stacks: Keep the Python stack of each live CUDA allocation over the whole fit (the allocator's light
            record, no history), so that an out-of-memory report names the lines that hold the memory. Off by
            default: it costs 10-17% of every step on an H200 (``benchmarks/memory_history_cost.py``); turn it on to
            chase an out-of-memory error. Off, the report has the allocator's counters and summary.

    Raises:
        TypeError: At construction, for an argument of the wrong type (``active=1.5``, ``dirpath=123``,
            ``activities="cpu"``); the message names the parameter and the value.
        ValueError: At construction, for a value out of range or a schedule that cannot work (``active=0``,
            ``every=-1``).

    Example::

        import lightning as L
        from lightning.pytorch.demos.boring_classes import BoringModel

        from lightning_streamprof import StreamProfiler

        profiler = StreamProfiler(skip_first=4, every=10, dirpath="streamprof")  # or Trainer(profiler="streamprof")
        trainer = L.Trainer(max_steps=40, profiler=profiler, logger=False, enable_checkpointing=False)
        trainer.fit(BoringModel())
        print(profiler.summary())
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        *,
        skip_first: int = SKIP_FIRST,
        warmup: int = WARMUP,
        active: int = ACTIVE,
        every: int | None = None,
        repeat: int = 0,
        max_overhead: float | Literal["auto"] | None = "auto",
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        activities: Sequence[Activity] | None = None,
        compress_level: int = 2,
        row_limit: int = 10,
        analyze: bool = True,
        all_threads: bool | None = None,
        straggler_threshold: float = THRESHOLD,
        gather_after: int | None = None,
        gather_timeout: float = 30.0,
        timeout: float = 60.0,
        slowdown: float | bool = WATCH.factor,
        slowdown_steps: int = WATCH.steps,
        stall_factor: float = WATCH.stall_factor,
        on_request: bool = True,
        request_poll: float = POLL_SECONDS,
        request_signal: str | int | None = SIGNAL,
        memory_snapshot: bool = False,
        oom_stacks: bool = False,
    ) -> None:
        settings = checked_settings(locals())
        super().__init__(dirpath=dirpath, filename=filename)
        self._settings = settings
        self.schedule, self.max_overhead = settings.schedule, settings.max_overhead
        self.activities, self.timeout = settings.activities, settings.timeout
        self._sessions = SessionMaker(settings.activities, settings.recording, settings.all_threads)
        self._profiled: ProfiledStage | NoStage = NO_STAGE  # Lightning's Profiler has `_stage`: the name
        self._scope_hooks = (self.start, self.stop, self._action_failed)  # what each ActionScope calls

    @override
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        stage = str(getattr(stage, "value", stage))  # TrainerFn enum -> "fit"
        super().setup(stage=stage, local_rank=local_rank, log_dir=log_dir)
        self._profiled.close()  # a stage that ended in an exception had no teardown
        self.dirpath = self._settings.dirpath or join_path(log_dir or os.getcwd(), "streamprof")
        self._profiled = ProfiledStage(self._settings, stage, str(self.dirpath), self._trainer, self._sessions)

    def _trainer(self) -> Any:
        return lightning_api.profiled_trainer(self)

    # ------------------------------------------------------------------ hooks (the hot path)
    @override
    def start(self, action_name: str) -> None:
        stage = self._profiled
        if action_name in stage.quiet.scopes and not stage.recorder.watching:
            return
        stage.start(action_name)

    @override
    def stop(self, action_name: str) -> None:
        stage = self._profiled
        if action_name in stage.quiet.scopes and not stage.recorder.watching:
            return
        stage.stop(action_name)

    @override
    def profile(self, action_name: str) -> contextlib.AbstractContextManager[str]:  # type: ignore[override]
        """Lightning's action scope: a shared no-op scope for an action that no hook handles outside a window
        (:mod:`.actions`), else an :class:`~.actions.ActionScope`; an exception leaving it writes the open window
        first (cut short)."""
        stage = self._profiled
        scope = stage.quiet.scopes.get(action_name)
        if scope is not None and not stage.recorder.watching:
            return scope
        return ActionScope(*self._scope_hooks, action_name)

    def _action_failed(self, err: BaseException) -> None:
        self._profiled.failed(err)  # the stage at the scope's end: a scope may outlive a stage's setup

    # ------------------------------------------------------------------ the end of a stage
    @override
    def describe(self) -> None:
        self._profiled.finish()
        super().describe()

    @override
    def _prepare_streams(self) -> None:
        """With ``filename``, the summary is appended to ``<dirpath>/<stage>-<filename>.txt`` through a temporary
        name (:func:`~.run_report.append_summary`); without, it goes to the log as Lightning's profilers do."""
        if self._write_stream is not None:
            return
        if self.filename and self.dirpath:
            self._write_stream = functools.partial(append_summary, join_path(str(self.dirpath),
                                                                             self._prepare_filename()))
        else:
            super()._prepare_streams()

    @override
    def teardown(self, stage: str | None) -> None:
        self._profiled.close()  # its windows stay readable through `windows` and `summary` until the next stage
        super().teardown(stage)

    def __del__(self) -> None:
        """Nothing here waits: a window still open is handed to the exporter, which finishes it in the background
        (at exit it gets ``timeout`` seconds); the analysis worker is told to stop."""
        with contextlib.suppress(Exception):
            self._profiled.release()
            super().teardown(getattr(self, "_stage", None))

    # ------------------------------------------------------------------ results
    @property
    def in_window(self) -> bool:
        """Whether the current step is in a window or in the steps after it that pay for it (``StreamPipeline``'s
        ``auto`` leaves those out of its timings)."""
        return self._profiled.in_window

    @property
    def windows(self) -> list[WindowResult]:
        """The latest exported windows (waits, up to ``timeout``, for pending exports); the full analysis is
        kept for the last few, headline ``metrics`` for all."""
        return self._profiled.windows()

    @property
    def distributed(self) -> list[DistributedStats]:
        """Rank 0 of a multi-rank run: the scored windows so far, one per window."""
        return self._profiled.distributed

    @property
    def cost(self) -> ProfilingCost | None:
        """What profiling cost this stage so far (None before it started), and at its end what the end waited."""
        return self._profiled.cost

    @property
    def report_path(self) -> str | None:
        """The HTML report of this stage's run, once global rank 0 wrote it at the stage's end (None before)."""
        return self._profiled.report_path

    @property
    def overhead_seconds(self) -> float:
        """Measured cost of the windows so far, in seconds of training time."""
        cost = self.cost
        return cost.seconds if cost is not None else 0.0

    @property
    def overhead_fraction(self) -> float:
        """Measured cost of the windows so far as a fraction of the training time so far."""
        cost = self.cost
        return cost.fraction if cost is not None else 0.0

    @override
    def summary(self) -> str:
        """The last windows' headline numbers and top operators (a few lines however many windows ran), and
        what went wrong."""
        return self._profiled.summary()


class streamprof(StreamProfiler):  # noqa: N801 - spelled as the short name it stands for
    """:class:`StreamProfiler` under its short name, for LightningCLI.

    ``--trainer.profiler=streamprof`` alone works in any script (the name is registered with Lightning). To pass
    arguments (``--trainer.profiler.every=10``), LightningCLI must resolve the name to a class while it parses,
    before the Trainer exists: it does once the script has imported ``StreamProfiler``
    (``from lightning_streamprof import StreamProfiler``), which defines this class. The class path form
    ``--trainer.profiler=lightning_streamprof.StreamProfiler --trainer.profiler.every=10`` always works.
    """


register_cli_errors(StreamProfiler)
