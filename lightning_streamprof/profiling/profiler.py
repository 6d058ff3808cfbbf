"""StreamProfiler: sampled Kineto windows across a whole Lightning run, exported off the hot path.

The class holds Lightning's hooks only; the windows' stepping (:mod:`.recorder`), the schedule and overhead
budget (:mod:`.schedule`), the Kineto session (:mod:`.session`), the export and analysis (:mod:`.exporter`,
:mod:`.worker`) are their own modules.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.profilers import Profiler
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_streamprof.profiling.action_scope import CALIBRATION_ACTION, QUIET_SCOPE, ActionScope, scope_savings
from lightning_streamprof.profiling.exporter import TraceExporter, WindowResult
from lightning_streamprof.profiling.hook_time import SAMPLE_EVERY, HookTime, timed_call_floor
from lightning_streamprof.profiling.lightning_cli import register as register_cli_errors
from lightning_streamprof.profiling.loop_time import CHECKPOINT, LoopTime, concerns, trainer_loaders
from lightning_streamprof.profiling.profiler_arguments import checked_arguments
from lightning_streamprof.profiling.recorder import WindowRecorder
from lightning_streamprof.profiling.run_dir import new_run_name
from lightning_streamprof.profiling.schedule import OverheadBudget, WindowSchedule
from lightning_streamprof.profiling.session import Activity, KinetoSession, cupti_teardown_note
from lightning_streamprof.profiling.storage import join_path
from lightning_streamprof.profiling.run_report import (
    append_summary,
    moved_notes,
    next_commands,
    run_results,
    with_other_ranks,
    write_run_files,
)
from lightning_streamprof.report.cost import ProfilingCost
from lightning_streamprof.report.markdown import window_markdown
from lightning_streamprof.report.metrics import headline_metrics
from lightning_streamprof.report.summary import moved_note, render_windows
from lightning_streamprof.results import RunResults

#: the action that starts a step, per stage (Lightning's loops name it ``[<LoopClass>].<prefix>_next``)
_STEP_ACTIONS = {
    "fit": ".train_dataloader_next",
    "validate": ".val_next",
    "test": ".test_next",
    "predict": ".predict_next",
}
#: steps after a window in the grid of ``every=None`` (its export's first steps are charged to it)
_COST_TAIL_STEPS = 2
#: TensorBoard text tag of each window's markdown summary
_TEXT_TAG = "streamprof/summary"
#: TensorBoard scalar of the profiling cost as a fraction of the training time so far
OVERHEAD_TAG = "streamprof/overhead"
#: windows (and distributed windows) the summary shows: the latest, so that it stays short in a long run
_SUMMARY_WINDOWS = 3
#: action names remembered as handled by a hook outside a window or not (Lightning's repeat every step; a
#: program's own ``profile(f"...{i}")`` names need not)
_QUIET_NAMES = 1024


#: said once when the memory view makes a window record the training thread although batches are staged on another
MEMORY_THREADS_NOTE = (
    "StreamProfiler: profile_memory=True with batches staged on a thread: windows record the training thread (and"
    " autograd's), not the staging thread, because torch drops every memory event of a session that records all"
    " threads; the staged batches' memory still counts in every event's totals.")


@runtime_checkable
class StagingCallback(Protocol):
    """A callback that may stage batches on a thread of its own (the profiler then records every thread) and
    reports what it did in the profiler's summary (:class:`~lightning_streamprof.StreamPipeline` is one)."""

    stages_on_thread: bool

    def report(self) -> str: ...


def _ends_training_step(action: str) -> bool:
    """Actions that run between training steps (validation, epoch end, checkpoints) close the open step."""
    return (
        "validation" in action
        or action.startswith("[_EvaluationLoop]")
        or action == "save_checkpoint"
        or action.endswith("on_train_epoch_end")
    )


class StreamProfiler(Profiler):
    r"""Records Kineto (``torch.profiler``) traces in sampled windows across the whole run.

    Between windows the profiler does nothing but count steps, so training runs at full speed. A window
    warms up for ``warmup`` steps (CUPTI start-up is not recorded), then records ``active`` steps with
    Lightning's actions as ``[pl][profile]<action>`` ranges and one ``ProfilerStep#N`` range per batch
    (``N`` is the global batch index; validation inside a fit closes the open step and is not counted).
    When the window ends the training thread only stops the trace; background threads have Kineto's writer save
    it, gzip it and write it as
    ``<dirpath>/<stage>-<time>/w<window>-step<first step>/rank<global rank>.<ns>.pt.trace.json.gz``
    through a temporary name, and a worker process analyses it; :meth:`summary` shows the results.
    The files open in Perfetto, torch-tb-profiler and HTA (``distributedInfo`` is always present), with the
    GPU utilization as a counter track. At the end of a stage, global rank 0 writes ``report.html`` (the HTML
    report of its windows, with the other ranks' traces of them where it can read them) in the run's directory,
    and the summary ends with its path and the commands to run next. With a ``TensorBoardLogger``, each window's
    markdown summary goes to the text tag ``streamprof/summary``.

    Window placement: ``skip_first`` steps are never profiled; then a window starts every ``every``
    steps. Each window's cost is measured (the slowdown of every step over the unprofiled steps' typical time,
    from its first warm-up step until its trace is exported and analysed, each step's capped at 3x the window's
    median so that a stall from elsewhere is not charged, plus the profiler's own time) and stated as a fraction
    of the training time: in :meth:`summary`, the HTML report and ``streamprof/overhead`` (TensorBoard). With
    ``max_overhead`` set, a window is moved to a later grid point until the cost of all windows stays within
    three quarters of ``max_overhead`` of the training time so far (a margin for what a window's cost varies by).
    The default (``every=None``) samples as often as that budget allows, so long runs get many windows and short
    runs few. A window that records the device has Kineto
    detach CUPTI at its end (``TEARDOWN_CUPTI=1``, from CUDA 12.6), so that the steps between windows run as fast
    as without a profiler; where CUPTI must stay attached, one warning says so.

    The recording options default to off because each one slows every recorded operator and enlarges the
    trace: ``record_shapes`` copies input shapes and holds tensor references, ``profile_memory`` records
    every allocation and free, ``with_stack`` unwinds the Python stack per operator (the costliest).
    Turn them on for the memory view and hot source lines; the overhead budget keeps the total bounded.

    Args:
        dirpath: Directory or fsspec URL (``s3://``, ``gs://``, ``abfs://``, ``memory://``) for the traces.
            Default: ``<trainer.log_dir>/streamprof``.
        filename: If set, :meth:`summary` is also written to ``<dirpath>/<stage>-<filename>.txt``.
        skip_first: Steps never profiled at the start of a stage.
        warmup: Steps profiled but not recorded before each window.
        active: Steps recorded per window.
        every: Steps between window starts; ``0`` records a single window; ``None`` places windows as
            often as ``max_overhead`` allows.
        repeat: Maximum number of windows, ``0`` for no limit.
        max_overhead: Budget for the profiler's share of training time (``0.01`` = 1%), or ``None``. ``"auto"``
            (the default): 1%, and 2% with ``record_shapes``, ``profile_memory`` or ``with_stack``, whose windows
            cost two to three times as much.
        record_shapes: Record operator input shapes.
        profile_memory: Record allocations and frees (memory view).
        with_stack: Record Python source locations (hot source lines).
        with_flops: Estimate FLOPs of matrix multiplications and convolutions.
        activities: A list of ``"cpu"``/``"cuda"`` to trace; default CPU plus CUDA when available.
        compress_level: ISA-L gzip level of the written traces (0 fastest .. 3 smallest).
        row_limit: Operators per window shown by :meth:`summary`.
        all_threads: Record the operators of every thread, not only the training loop's (where torch
            supports it). ``None``: on when a callback stages batches on its own thread (a
            :class:`StreamPipeline` with its staging thread), so the trace shows that work.
        analyze: Analyse each window in a worker process and log its headline numbers
            (``streamprof/gpu_utilization``, ``streamprof/sm_efficiency``, ``streamprof/achieved_occupancy``,
            ``streamprof/step_ms`` and ``streamprof/step_ms/<category>``) through the Trainer's loggers.
            In a multi-rank run each window's summaries are also gathered to rank 0 and scored
            (``streamprof/rank<R>/step_ms``, ``/sync_ms``, ``/transfer_ms``, ``/relative_score``,
            ``streamprof/straggler_score``, ``streamprof/stragglers``, ``streamprof/missing_ranks``), a straggler
            is named in a warning, and ``streamprof/distributed.json`` is written in the window's directory.
        straggler_threshold: A rank whose relative score (the fastest rank's median step time outside waiting
            for others / its own) is below this is a straggler.
        gather_after: Steps after a window at which the ranks' summaries are gathered; ``None``: at the next
            window's first recorded step (or the end of the stage).
        gather_timeout: Seconds rank 0 waits at a gather (each host's local rank 0 waits half of it for its ranks;
            then warns and goes on).
        timeout: Seconds the profiler waits at most: for the trace directory at setup, for each trace write,
            and for pending exports at the end of a stage or at exit (then they are abandoned, with a warning).

    Faults never stop training: an exception (or Ctrl+C) inside a window writes the window, cut short,
    before the exception goes on; a trace directory that cannot be written, fills up or stops answering, and
    an analysis that fails, are warnings; nothing waits in ``__del__`` and no temporary file is left behind.
    One Kineto session records at a time: while a ``torch.profiler`` session of the program's own (or another
    StreamProfiler's) is active, a window is not recorded (one warning) and that session is left untouched.

    Raises:
        TypeError: At construction, for an argument of the wrong type (``active=1.5``, ``dirpath=123``,
            ``activities="cpu"``); the message names the parameter and the value.
        ValueError: At construction, for a value out of range or a schedule that cannot work (``active=0``,
            ``every=-1``, ``row_limit=-1``).

    Example::

        trainer = Trainer(profiler="streamprof")  # no import needed
        trainer = Trainer(profiler=StreamProfiler(every=500, with_stack=True, dirpath="s3://bucket/prof"))
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        *,
        skip_first: int = 20,
        warmup: int = 2,
        active: int = 3,
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
        straggler_threshold: float = 0.75,
        gather_after: int | None = None,
        gather_timeout: float = 30.0,
        timeout: float = 60.0,
    ) -> None:
        args = checked_arguments(locals())
        super().__init__(dirpath=dirpath, filename=filename)
        grid = args.warmup + args.active + _COST_TAIL_STEPS if args.every is None else args.every
        self.schedule = WindowSchedule(skip_first=args.skip_first, warmup=args.warmup, active=args.active,
                                       every=grid, repeat=args.repeat)
        self.max_overhead = args.max_overhead
        self.recording_options = {"record_shapes": record_shapes, "profile_memory": profile_memory,
                                  "with_stack": with_stack, "with_flops": with_flops}
        self.activities = args.activities
        self.compress_level = args.compress_level
        self.row_limit = args.row_limit
        self.analyze = analyze
        self.all_threads = all_threads
        self._said_memory_threads = False
        self._cupti_note: str | None = None  # said once, at the first window that records the device
        if all_threads and profile_memory:
            warnings.warn("StreamProfiler: `all_threads=True` with `profile_memory=True`: torch records no memory"
                          " event in a session of all threads (pytorch/pytorch#166121), so the windows will have no"
                          " memory view. Leave `all_threads=None` for the memory view.", stacklevel=2)
        self.straggler_threshold = args.straggler_threshold
        self.gather_after = args.gather_after
        self.gather_timeout = args.gather_timeout
        self._aggregator: Any = None
        self.timeout = args.timeout
        self._user_dirpath = os.fspath(dirpath) if dirpath is not None else None
        self._exporter: TraceExporter | None = None
        self._last_exporter: TraceExporter | None = None  # the closed stage's, for `windows` and `summary`
        self._recorder: WindowRecorder | None = None
        self._step_suffix = "\0never"
        self._loop_time: LoopTime | None = None  # the fit's validation runs and checkpoints
        self._hooks: HookTime | None = None  # what the hooks cost every step, from sampled steps
        # per action seen: its no-op scope if no hook handles it outside a window, else False
        self._quiet: dict[str, contextlib.nullcontext[str] | bool] = {}
        self._hook_floor: float | None = None  # a timed no-op call's seconds, calibrated at the first setup
        self._scope_savings: dict[type, float] | None = None  # per action, against Lightning's scope (ditto)
        self._global_rank = 0
        self._failed = False
        self._reported: str | None = None
        self._report_path: str | None = None
        self._run: RunResults | None = None
        self._seen_exception = 0
        self._end_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle

    @override
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        stage = str(getattr(stage, "value", stage))  # TrainerFn enum -> "fit"
        super().setup(stage=stage, local_rank=local_rank, log_dir=log_dir)
        self._end_stage()  # a stage that ended in an exception had no teardown
        self._failed = False
        self._reported = self._report_path = self._run = None
        self._end_seconds = None
        self._step_suffix = _STEP_ACTIONS.get(stage, "\0never")
        self._quiet = {}
        self._loop_time = LoopTime() if stage == "fit" else None
        trainer = self._trainer()
        rank = int(getattr(trainer, "global_rank", 0)) if trainer is not None else 0
        world_size = int(getattr(trainer, "world_size", 1)) if trainer is not None else 1
        self._global_rank = rank
        base = self._user_dirpath if self._user_dirpath is not None else join_path(log_dir or os.getcwd(), "streamprof")
        self.dirpath = base
        exporter = self._exporter = TraceExporter(compress_level=self.compress_level, analyze=self.analyze,
                                                  timeout=self.timeout)
        made = exporter.make_run_dir(str(base), lambda: new_run_name(stage)) if rank == 0 else None
        run_name = made or new_run_name(stage)  # rank 0's, fresh, is given to every rank
        if trainer is not None and world_size > 1:
            run_name = trainer.strategy.broadcast(run_name)
        run_dir = join_path(str(base), run_name)
        self._recorder = None
        self._aggregator = None
        if not (made is not None if rank == 0 else exporter.check_writable(run_dir)):
            self._warn_problems()
            return
        self._aggregator = self._new_aggregator(run_name, rank, world_size)
        agg = self._aggregator
        self._recorder = WindowRecorder(
            self.schedule, OverheadBudget(self.max_overhead), self._exporter,
            self._new_session, self._global_step, run_name=run_name, run_dir=run_dir, rank=rank, world_size=world_size,
            agree=agg.agree_defer if agg is not None else None,
            on_window_end=agg.window_ended if agg is not None else None,
        )
        if self._hook_floor is None:  # a few milliseconds, while no step runs
            self._hook_floor = timed_call_floor()
            self._scope_savings = scope_savings(self.profile)
            self._quiet.pop(CALIBRATION_ACTION, None)
        self._hooks = HookTime(floor=self._hook_floor, savings=self._scope_savings or {})
        exporter.start_worker()  # while no step runs

    def _new_aggregator(self, run_name: str, rank: int, world_size: int) -> Any:
        """The distributed aggregation of a multi-rank run (None in a single process or without analysis)."""
        if world_size <= 1 or not self.analyze:
            return None
        from lightning_streamprof.distributed.live import make_aggregator

        trainer = self._trainer()
        per_host = int(getattr(trainer, "num_devices", 0) or 0) if trainer is not None else 0  # ranks per node
        return make_aggregator(run_name, rank, world_size, threshold=self.straggler_threshold,
                               gather_after=self.gather_after, timeout=self.gather_timeout,
                               log_metrics=self._log_metrics, global_step=self._global_step,
                               per_host=per_host or None)

    def _trainer(self) -> Any:
        module = getattr(self, "_lightning_module", None)
        try:
            return module.trainer if module is not None else None
        except (ReferenceError, RuntimeError, AttributeError):
            return None

    def _global_step(self) -> int:
        trainer = self._trainer()
        return int(getattr(trainer, "global_step", 0)) if trainer is not None else 0

    def _staging_callbacks(self) -> list[StagingCallback]:
        trainer = self._trainer()
        return [cb for cb in getattr(trainer, "callbacks", None) or [] if isinstance(cb, StagingCallback)]

    def _new_session(self) -> KinetoSession:
        all_threads = self.all_threads
        if all_threads is None:
            all_threads = any(cb.stages_on_thread for cb in self._staging_callbacks())
            if all_threads and self.recording_options["profile_memory"]:
                # torch drops every memory event of a session that records all threads (pytorch/pytorch#166121):
                # the memory view needs the training thread's session (autograd's threads are recorded too)
                all_threads = False
                if not self._said_memory_threads:
                    self._said_memory_threads = True
                    rank_zero_info(MEMORY_THREADS_NOTE)
        session = KinetoSession(self.activities, all_threads=all_threads, **self.recording_options)
        if session.records_device and self._cupti_note is None:
            self._cupti_note = cupti_teardown_note() or ""
            if self._cupti_note:
                rank_zero_warn(f"StreamProfiler: {self._cupti_note}.")
        return session

    @property
    def in_window(self) -> bool:
        """Whether the current step is in a window or in the steps after it that pay for it (``StreamPipeline``'s
        ``auto`` leaves those out of its timings)."""
        recorder = getattr(self, "_recorder", None)
        return recorder is not None and recorder.watching

    @override
    def describe(self) -> None:
        self._finish()
        super().describe()

    @override
    def _prepare_streams(self) -> None:
        """With ``filename``, the summary is appended to ``<dirpath>/<stage>-<filename>.txt`` by this package's
        writes (see :func:`~lightning_streamprof.profiling.run_report.append_summary`); without, it goes to the log
        as Lightning's profilers do."""
        if self._write_stream is not None:
            return
        if self.filename and self.dirpath:
            path = join_path(str(self.dirpath), self._prepare_filename())
            self._write_stream = functools.partial(append_summary, path)
        else:
            super()._prepare_streams()

    @override
    def teardown(self, stage: str | None) -> None:
        self._end_stage()
        super().teardown(stage)

    def _end_stage(self) -> None:
        """Finish the stage and close its exporter (its windows stay readable through ``windows`` and ``summary``
        until the next stage starts)."""
        self._time_hooks(False)  # a sampled step's timed hooks
        self._finish()
        exporter = getattr(self, "_exporter", None)
        if exporter is not None:
            self._exporter, self._last_exporter = None, exporter
            exporter.close(self.timeout)  # stops the analysis worker; a later stage starts a new one
            self._warn_problems(exporter)

    def __del__(self) -> None:
        """Nothing here waits: a window still open is handed to the exporter, which finishes it in the background
        (at exit it gets ``timeout`` seconds); the analysis worker is told to stop."""
        with contextlib.suppress(Exception):
            self._end_open_window()
            exporter = getattr(self, "_exporter", None)
            if exporter is not None:
                exporter.release()
            super().teardown(getattr(self, "_stage", None))

    @override
    def profile(self, action_name: str) -> contextlib.AbstractContextManager[str]:  # type: ignore[override]
        """Lightning's action scope: a shared no-op scope for an action that no hook handles outside a window (most
        of them), else an :class:`ActionScope`; an exception leaving it writes the open window first (cut short).
        Both cost less than Lightning's generator scope, which a run with no profiler pays."""
        quiet = self._quiet.get(action_name)
        if quiet is None:
            quiet = self._learn(action_name)
        if quiet:
            recorder = self._recorder
            if recorder is None or not recorder.watching:
                return quiet
        return ActionScope(self, action_name)

    def _on_exception(self, err: BaseException) -> None:
        """An exception (or Ctrl+C) leaves an action: the run may be ending, so the open window is written now.
        A ``StopIteration`` (the end of an epoch's data) is not a fault."""
        if isinstance(err, StopIteration) or id(err) == self._seen_exception:
            return
        self._seen_exception = id(err)
        self._end_open_window()

    def _end_open_window(self) -> None:
        """Close the open step and hand a partly recorded window to the exporter."""
        recorder = getattr(self, "_recorder", None)
        if recorder is not None and recorder.active:
            self._guarded(recorder.close_step)
            if recorder.active:
                self._guarded(recorder.end_window)

    def _finish(self) -> None:
        """Close the open step, export a partly recorded window, wait (bounded) for pending exports, log them,
        gather the ranks' last windows and write the run's report; the time it takes is stated with the cost."""
        start = time.perf_counter()
        self._end_open_window()
        exporter = getattr(self, "_exporter", None)
        if exporter is not None:
            exporter.finish(self.timeout)
            self._log_ready(save=True)
        if getattr(self, "_aggregator", None) is not None:
            self._aggregator.finish()
            self._log_metrics({}, self._global_step(), save=True)
        if exporter is not None:
            first = self._end_seconds is None
            if first:
                self._end_seconds = time.perf_counter() - start  # what the report can say
            self._write_report()
            cost = self.cost
            if first and cost is not None and cost.windows:
                self._end_seconds = time.perf_counter() - start  # the report's writing included
                self._log_metrics({OVERHEAD_TAG: cost.fraction}, self._global_step(), save=True)

    def _write_report(self) -> None:
        """Once per stage, on global rank 0: the run's HTML report (and StreamPipeline's report) beside the traces.
        It holds the windows whose analysis is kept (the latest few of a long run; a note says how to read all)."""
        recorder = getattr(self, "_recorder", None)
        exporter = self._exporter
        if recorder is None or exporter is None or self._global_rank != 0 or self._reported == recorder.run_dir:
            return
        if exporter.full:  # already warned about; the report would not fit either
            return
        run = run_results(exporter.results, recorder.run_name)
        if run is None:
            return
        self._reported = recorder.run_dir
        text = "\n".join(cb.report() for cb in self._staging_callbacks())
        notes = moved_notes(recorder.moves, exporter.results)
        if self._said_memory_threads:
            notes.append(MEMORY_THREADS_NOTE.removeprefix("StreamProfiler: "))
        if self._cupti_note:
            notes.append(self._cupti_note[0].upper() + self._cupti_note[1:] + ".")
        outside, advice = self._outside_training()
        notes += advice
        if len(run.windows) < exporter.written:
            notes.append(f"This report holds the last {len(run.windows)} analysed of the {exporter.written} windows "
                         f"written; `streamprof report {recorder.run_dir}` reads them all.")
        if recorder.world_size > 1:  # the other ranks' traces of the same windows, where this rank can read them
            run, found_notes = with_other_ranks(run, exporter.results, recorder.world_size, self.timeout)
            notes += found_notes
        self._report_path = write_run_files(recorder.run_dir, run, pipeline_text=text or None, notes=notes,
                                            cost=self.cost, outside=outside)
        self._run = run

    def _warn_problems(self, exporter: TraceExporter | None = None) -> None:
        """Warn (on the training thread) about what went wrong in the background: the first of each kind."""
        exporter = exporter or self._exporter
        for message in exporter.problems.drain() if exporter is not None else []:
            warnings.warn(f"StreamProfiler: {message}; training goes on", stacklevel=3)

    def _log_ready(self, save: bool = False) -> None:
        """Log analysed windows through the Trainer's loggers (on the training thread)."""
        exporter = self._exporter
        assert exporter is not None
        self._warn_problems(exporter)
        ready, exporter.ready = exporter.ready, []
        moves = self._recorder.moves if self._recorder is not None else {}
        for result in ready:
            if self._aggregator is not None:
                self._aggregator.add_local(result.window, result.analysis, result.global_step)
            if result.analysis is None:
                continue
            cost = self.cost
            text = window_markdown(result.analysis, result.window, result.first_step, result.last_step,
                                   moved=moved_note(result.window, result.first_step, moves.get(result.window)),
                                   path=result.path, cost=cost.sentence() if cost is not None else None)
            metrics = result.metrics if result.metrics is not None else headline_metrics(result.analysis)
            if cost is not None:
                metrics = {**metrics, OVERHEAD_TAG: cost.fraction}
            self._log_metrics(metrics, result.global_step, save, text=text)

    def _log_metrics(self, metrics: dict[str, float], step: int, save: bool = False, text: str | None = None) -> None:
        """Log through the Trainer's loggers (and ``text`` as TensorBoard markdown on rank 0); a logger's failure
        is a warning."""
        trainer = self._trainer()
        for logger in list(getattr(trainer, "loggers", []) or []) if trainer is not None else []:
            try:
                if metrics:
                    logger.log_metrics(metrics, step=step)
                if text is not None and isinstance(logger, TensorBoardLogger) and self._global_rank == 0:
                    logger.experiment.add_text(_TEXT_TAG, text, global_step=step)
                if save:
                    logger.save()
            except Exception as err:  # noqa: BLE001
                warnings.warn(f"StreamProfiler: could not log window metrics: {err}", stacklevel=2)

    # ------------------------------------------------------------------ hooks (the hot path)

    @override
    def start(self, action_name: str) -> None:
        quiet = self._quiet.get(action_name)
        if quiet is None:
            quiet = self._learn(action_name)
        if quiet:  # most of Lightning's actions: nothing to do outside a window
            recorder = self._recorder
            if recorder is None or not recorder.watching:
                return
        if self._loop_time is not None:
            self._loop_time.start(action_name)
        if action_name == CHECKPOINT and self._exporter is not None:
            # a trace that Kineto's writer is still saving to the temporary directory may share its disk with the
            # checkpoint: the save (a fraction of a step) ends first, and a failed one has given its space back
            self._exporter.wait_saved(self._exporter.timeout)
        recorder = self._recorder
        if recorder is None:
            return
        if action_name.endswith(self._step_suffix):
            logs = self._exporter is not None and bool(self._exporter.ready or self._exporter.problems.pending)
            if logs:
                self._log_ready()
            if self._aggregator is not None:
                self._aggregator.at_step(recorder.next_step)
            self._guarded(recorder.step_boundary, self._resume_offset)
            hooks = self._hooks
            if hooks is not None and hooks.step_boundary(recorder.watching, logs) != ("start" in self.__dict__):
                self._time_hooks(hooks.timing)
        if recorder.watching:
            if recorder.in_step and _ends_training_step(action_name):
                self._guarded(recorder.end_step_early)
            if recorder.recording:
                recorder.open_range(action_name)

    @override
    def stop(self, action_name: str) -> None:
        if self._quiet.get(action_name):
            recorder = self._recorder
            if recorder is None or not recorder.watching:
                return
        if self._loop_time is not None:
            self._loop_time.stop(action_name)
        recorder = self._recorder
        if recorder is not None and recorder.watching:
            recorder.close_range(action_name)

    def _learn(self, action: str) -> contextlib.nullcontext[str] | bool:
        """The no-op scope of ``action`` if no hook handles it outside a window, else False (remembered for the
        first names seen)."""
        quiet = QUIET_SCOPE(action) if not (concerns(action) or action.endswith(self._step_suffix)) else False
        if len(self._quiet) < _QUIET_NAMES:
            self._quiet[action] = quiet
        return quiet

    def _time_hooks(self, on: bool) -> None:
        """Swap timed hooks in for a sampled step (instance attributes shadow the methods), and out after it."""
        if on:
            hooks, cls = self._hooks, type(self)
            self.start = functools.partial(hooks.timed, functools.partial(cls.start, self))  # type: ignore[method-assign]
            self.stop = functools.partial(hooks.timed, functools.partial(cls.stop, self))  # type: ignore[method-assign]
            self.profile = functools.partial(hooks.scoped, functools.partial(cls.profile, self))  # type: ignore[method-assign]
        else:
            for name in ("start", "stop", "profile"):
                self.__dict__.pop(name, None)

    def _resume_offset(self) -> int:
        """Global index of the first batch of this run (a resumed fit continues its numbering)."""
        trainer = self._trainer()
        try:
            return int(trainer.fit_loop.epoch_loop.batch_progress.total.ready) if self._step_suffix == _STEP_ACTIONS["fit"] else 0
        except AttributeError:
            return 0

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """Profiling problems become one warning; training goes on without further windows."""
        if self._failed:
            return
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - never break the user's training run
            self._failed = True
            warnings.warn(f"StreamProfiler: profiling stopped after an error: {err!r}; training goes on", stacklevel=2)
            if self._recorder is not None:
                self._recorder.stop()

    # ------------------------------------------------------------------ results

    @property
    def windows(self) -> list[WindowResult]:
        """The latest exported windows (waits, up to ``timeout``, for pending exports); the full analysis is
        kept for the last few, headline ``metrics`` for all."""
        exporter = self._exporter or self._last_exporter
        if exporter is None:
            return []
        exporter.wait(self.timeout)
        return list(exporter.results)

    @property
    def distributed(self) -> list[Any]:
        """Rank 0 of a multi-rank run: the scored windows so far (``DistributedStats``, one per window)."""
        return list(self._aggregator.results) if self._aggregator is not None else []

    @property
    def overhead_seconds(self) -> float:
        """Measured cost of the windows so far, in seconds of training time."""
        return self._recorder.budget.total_cost if self._recorder is not None else 0.0

    @property
    def overhead_fraction(self) -> float:
        """Measured cost of the windows so far as a fraction of the training time so far."""
        cost = self.cost
        return cost.fraction if cost is not None else 0.0

    @property
    def cost(self) -> ProfilingCost | None:
        """What profiling cost this stage so far (None before it started), and at its end what the end waited."""
        recorder = self._recorder
        if recorder is None:
            return None
        budget, hooks = recorder.budget, self._hooks
        return ProfilingCost(budget.total_cost, recorder.training_seconds, budget.windows, self._end_seconds,
                             max_overhead=budget.max_overhead, first_window_seconds=budget.first_window_cost,
                             first_window_parts=budget.first_window_parts,
                             hook_seconds=hooks.seconds if hooks is not None else 0.0,
                             hook_per_step=hooks.per_step if hooks is not None else None,
                             hook_sample_every=SAMPLE_EVERY)

    @override
    def summary(self) -> str:
        """The last windows' headline numbers and top operators (a few lines however many windows ran), and
        what went wrong."""
        results = self.windows
        exporter = self._exporter or self._last_exporter
        problems = [f"StreamProfiler: {line}" for line in exporter.problems.lines()] if exporter is not None else []
        reports = [cb.report() for cb in self._staging_callbacks()]
        loop = [line for lines in self._outside_training() for line in lines]
        if not results:
            return "\n".join(["StreamProfiler: no window was recorded.", *problems, *loop, *reports])
        recorder = self._recorder
        footer = [*problems, *loop]
        if self.distributed:
            from lightning_streamprof.report.text import render_distributed

            footer += [render_distributed(d, top=self.row_limit) for d in self.distributed[-_SUMMARY_WINDOWS:]]
        footer += reports
        if recorder is not None:
            footer += next_commands(recorder.run_dir, self._report_path, self._log_dirs())
        total = exporter.written if exporter is not None else len(results)
        return render_windows(results, rank=self._global_rank, cost=self.cost,
                              row_limit=self.row_limit, total=total, shown=_SUMMARY_WINDOWS, run=self._run,
                              moves=recorder.moves if recorder else None, footer=footer)

    def _outside_training(self) -> tuple[list[str], list[str]]:
        """What the fit spent outside its training steps (validation, epoch starts, checkpoints), and the advice
        it calls for."""
        loop = getattr(self, "_loop_time", None)
        if loop is None:
            return [], []
        try:
            trainer = self._trainer()
            return loop.facts(), loop.advice(trainer_loaders(trainer, "val"), trainer_loaders(trainer, "train"))
        except Exception:  # noqa: BLE001 - a summary line must not end the run
            return [], []

    def _log_dirs(self) -> list[str]:
        """The directories of the Trainer's TensorBoard loggers (for ``tensorboard --logdir``)."""
        trainer = self._trainer()
        out = []
        for logger in getattr(trainer, "loggers", None) or []:
            if isinstance(logger, TensorBoardLogger) and logger.root_dir:
                out.append(str(logger.root_dir))
        return out


class streamprof(StreamProfiler):  # noqa: N801 - spelled as the short name it stands for
    """:class:`StreamProfiler` under its short name, for LightningCLI.

    ``--trainer.profiler=streamprof`` alone works in any script (the name is registered with Lightning). To pass
    arguments (``--trainer.profiler.every=10``), LightningCLI must resolve the name to a class while it parses,
    before the Trainer exists: it does once the script has imported ``StreamProfiler``
    (``from lightning_streamprof import StreamProfiler``), which defines this class. The class path form
    ``--trainer.profiler=lightning_streamprof.StreamProfiler --trainer.profiler.every=10`` always works.
    """


register_cli_errors(StreamProfiler)
