"""One stage of a Trainer run (``fit``, ``validate``...) as the profiler sees it, built whole at the stage's setup:
its windows (:class:`~.recorder.WindowRecorder`), the export of their traces (:class:`~.exporter.TraceExporter`),
the fit's time outside its training steps (:class:`~.loop_time.LoopTime`), the gather of a multi-rank run
(:class:`~lightning_streamprof.distributed.live.LiveAggregator`), and what it logs (:mod:`.loggers`) and reports
(:mod:`.run_report`). :class:`~lightning_streamprof.StreamProfiler`'s hooks forward here; before the first setup
they go to :data:`NO_STAGE`, which does nothing.

Profiling problems never stop training: an error in the recorder is one warning and no further window
(:meth:`ProfiledStage._guarded`); problems met off the training thread are warned about from it, the first of each
kind.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

from lightning_streamprof.pipeline import lightning_api
from lightning_streamprof.profiling.actions import QuietActions, ends_training_step, step_action
from lightning_streamprof.profiling.exporter import TraceExporter, WindowResult
from lightning_streamprof.profiling.loggers import OVERHEAD_TAG, LoggerFanOut
from lightning_streamprof.profiling.loop_time import CHECKPOINT, LoopTime, trainer_loaders
from lightning_streamprof.profiling.metrics import headline_metrics
from lightning_streamprof.profiling.off_schedule import OffSchedule
from lightning_streamprof.profiling.out_of_memory import is_out_of_memory
from lightning_streamprof.profiling.pipeline_view import run_pipeline, stateful
from lightning_streamprof.profiling.recorder import WindowRecorder
from lightning_streamprof.profiling.run_dir import new_run_name
from lightning_streamprof.profiling.run_report import RunReporter
from lightning_streamprof.profiling.schedule import OverheadBudget
from lightning_streamprof.profiling.settings import ProfilerSettings
from lightning_streamprof.profiling.storage import join_path
from lightning_streamprof.profiling.window_sessions import SessionMaker, staging_callbacks
from lightning_streamprof.results import DistributedStats, PipelineRun, ProfilingCost


class ProfiledStage:
    """The parts of stage ``stage``, writing under ``base``; ``trainer()`` gives the Trainer (None once it is gone),
    ``sessions`` each window's Kineto session."""

    def __init__(self, settings: ProfilerSettings, stage: str, base: str, trainer: Callable[[], Any],
                 sessions: SessionMaker) -> None:
        self.settings, self._trainer, self._sessions = settings, trainer, sessions
        now = trainer()
        self.rank = int(getattr(now, "global_rank", 0))
        world_size = int(getattr(now, "world_size", 1))
        self.exporter = TraceExporter(settings.compress_level, settings.analyze, settings.timeout)
        made = self.exporter.make_run_dir(base, lambda: new_run_name(stage)) if self.rank == 0 else None
        run_name = made or new_run_name(stage)  # rank 0's, fresh, is given to every rank
        if now is not None and world_size > 1:
            run_name = now.strategy.broadcast(run_name)
        run_dir = join_path(base, run_name)
        #: the run's directory could be made: windows are recorded
        self.writable = made is not None if self.rank == 0 else self.exporter.check_writable(run_dir)
        self.loggers = LoggerFanOut(trainer, self.rank)
        self.aggregator = self._aggregator(run_name, world_size) if self.writable else None
        self.reporter = RunReporter(run_name, run_dir, self.rank, world_size, row_limit=settings.row_limit,
                                    timeout=settings.timeout)
        self.loop_time = LoopTime() if stage == "fit" else None
        self._step_suffix, self._fit = step_action(stage), stage == "fit"
        self.quiet = QuietActions(self._step_suffix)
        self._stateful: tuple[Any, ...] | None = None  # the staging callbacks with a state, found at the first ask
        agg = self.aggregator
        self.recorder = WindowRecorder(
            settings.schedule, OverheadBudget(settings.max_overhead), self.exporter,
            lambda: sessions(staging_callbacks(trainer())), self._global_step, run_name=run_name, run_dir=run_dir,
            rank=self.rank, world_size=world_size, agree=agg.agree_defer if agg is not None else None,
            on_window_end=agg.window_ended if agg is not None else None, pipelines=self._pipelines)
        #: the windows off the schedule: the step-time watch, the requests, the memory snapshots
        self.off = OffSchedule(settings, self.recorder, self._pipelines, base=base, run_dir=run_dir, rank=self.rank,
                               world_size=world_size, fit=self._fit, share=agg)
        self.end_seconds: float | None = None  # what the end of the stage took, once it ended
        self._failed = False
        self._seen_exception = 0
        self._closed = False
        if self.writable:
            self.exporter.start_worker()  # while no step runs
        else:
            self.recorder.stop()
            self.warn_problems()

    def _aggregator(self, run_name: str, world_size: int) -> Any:
        """The distributed aggregation of a multi-rank run (None in a single process or without analysis)."""
        if world_size <= 1 or not self.settings.analyze:
            return None
        from lightning_streamprof.distributed.live import make_aggregator

        per_host = int(getattr(self._trainer(), "num_devices", 0) or 0)  # ranks per node
        s = self.settings
        return make_aggregator(run_name, self.rank, world_size, threshold=s.straggler_threshold,
                               gather_after=s.gather_after, timeout=s.gather_timeout, log_metrics=self.loggers.log,
                               global_step=self._global_step, per_host=per_host or None)

    def _global_step(self) -> int:
        return int(getattr(self._trainer(), "global_step", 0))

    def _pipelines(self) -> tuple[Any, ...]:
        """The Trainer's staging callbacks that say what they do through a ``state`` (found once: a Trainer's
        callbacks are set when it is made)."""
        if self._stateful is None:
            trainer = self._trainer()
            if trainer is None:
                return ()
            self._stateful = stateful(staging_callbacks(trainer))
        return self._stateful

    def pipeline(self) -> PipelineRun | None:
        """What the run's staging callback does now, from its own state (None without one)."""
        return run_pipeline(self._pipelines())

    @property
    def in_window(self) -> bool:
        """Inside a window or in the steps after it that pay for it."""
        return self.recorder.watching

    # ------------------------------------------------------------------ hooks
    def start(self, action: str) -> None:
        """An action that is not quiet outside a window, or any action inside one, starts."""
        self.quiet.learn(action)
        if self.loop_time is not None:
            self.loop_time.start(action)
        self.off.action(action)
        if action == CHECKPOINT:
            # a trace that Kineto's writer is still saving to the temporary directory may share its disk with the
            # checkpoint: the save (a fraction of a step) ends first, and a failed one has given its space back
            self.exporter.wait_saved(self.exporter.timeout)
        recorder = self.recorder
        if action.endswith(self._step_suffix):
            self._step_boundary()
        if recorder.watching:
            if recorder.in_step and ends_training_step(action):
                self._guarded(recorder.end_step_early)
            if recorder.recording:
                recorder.open_range(action)

    def stop(self, action: str) -> None:
        if self.loop_time is not None:
            self.loop_time.stop(action)
        if self.recorder.watching:
            self.recorder.close_range(action)

    def failed(self, err: BaseException) -> None:
        """An exception (or Ctrl+C) leaves an action: the run may be ending, so the open window is written now.
        A ``StopIteration`` (the end of an epoch's data) is not a fault."""
        if isinstance(err, StopIteration) or id(err) == self._seen_exception:
            return
        self._seen_exception = id(err)
        if self.writable and is_out_of_memory(err):
            self.off.out_of_memory(self.reporter.run_dir, self.rank, self.recorder.offset + self.recorder.next_step - 1,
                                   self._holders)
        self.end_open_window()

    def _holders(self) -> tuple[Any, list[Any]]:
        """The trained module and its optimizers (whose tensors an out-of-memory report names)."""
        trainer = self._trainer()
        return getattr(trainer, "lightning_module", None), list(getattr(trainer, "optimizers", None) or [])

    def _step_boundary(self) -> None:
        exporter = self.exporter
        if exporter.ready or exporter.problems.pending:
            self.log_ready()
        if self.aggregator is not None:
            self.aggregator.at_step(self.recorder.next_step)
        self.off.at_step(self._guarded)
        self._guarded(self.recorder.step_boundary, self._first_batch)

    def _first_batch(self) -> int:
        """Global index of the stage's first batch (a resumed fit continues its numbering)."""
        try:
            return lightning_api.fit_batches_started(self._trainer()) if self._fit else 0
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
            self.recorder.stop()

    # ------------------------------------------------------------------ windows' results
    def log_ready(self, save: bool = False) -> None:
        """Log the windows analysed since the last call through the Trainer's loggers (on the training thread)."""
        self.warn_problems()
        exporter = self.exporter
        ready, exporter.ready = exporter.ready, []
        pipeline = self.pipeline() if ready else None
        for result in ready:
            if self.aggregator is not None:
                self.aggregator.add_local(result.window, result.analysis, result.global_step)
            if result.analysis is None:
                continue
            self.off.analysed(result.window, result.analysis)
            cost = self.cost
            text = self.reporter.window_text(result.analysis, result, self.recorder.moves.get(result.window), cost,
                                             self.recorder.waits.get(result.window), pipeline, self.off.triggered())
            metrics = result.metrics if result.metrics is not None else headline_metrics(result.analysis)
            if cost is not None:
                metrics = {**metrics, OVERHEAD_TAG: cost.fraction}
            self.loggers.log(metrics, result.global_step, save, text=text)

    def warn_problems(self) -> None:
        """Warn (on the training thread) about what went wrong in the background: the first of each kind."""
        for message in self.exporter.problems.drain():
            warnings.warn(f"StreamProfiler: {message}; training goes on", stacklevel=3)

    def windows(self) -> list[WindowResult]:
        """The latest exported windows, once pending exports are done (``timeout`` at most)."""
        self.exporter.wait(self.settings.timeout)
        return list(self.exporter.results)

    @property
    def distributed(self) -> list[DistributedStats]:
        return list(self.aggregator.results) if self.aggregator is not None else []

    @property
    def report_path(self) -> str | None:
        return self.reporter.report_path

    @property
    def cost(self) -> ProfilingCost | None:
        """What profiling cost this stage so far (None when no window could be written), and what its end took."""
        if not self.writable:
            return None
        budget = self.recorder.budget
        return ProfilingCost(budget.total_cost, self.recorder.training_seconds, budget.windows, self.end_seconds,
                             max_overhead=budget.max_overhead, first_window_seconds=budget.first_window_cost,
                             first_window_parts=budget.first_window_parts)

    # ------------------------------------------------------------------ the end
    def end_open_window(self) -> None:
        """Close the open step and hand a partly recorded window to the exporter."""
        if self.recorder.active:
            self._guarded(self.recorder.close_step)
            if self.recorder.active:
                self._guarded(self.recorder.end_window)

    def finish(self) -> None:
        """Close the open step, export a partly recorded window, wait (bounded) for pending exports, log them,
        gather the ranks' last windows and write the run's report; the time it takes is stated with the cost."""
        start = time.perf_counter()
        self.end_open_window()
        self.exporter.finish(self.settings.timeout)
        self.log_ready(save=True)
        if self.aggregator is not None:
            self.aggregator.finish()
            self.loggers.log({}, self._global_step(), save=True)
        first = self.end_seconds is None
        if first:
            self.end_seconds = time.perf_counter() - start  # what the report can say
        self._write_report()
        cost = self.cost
        if first and cost is not None and cost.windows:
            self.end_seconds = time.perf_counter() - start  # the report's writing included
            self.loggers.log({OVERHEAD_TAG: cost.fraction}, self._global_step(), save=True)

    def _write_report(self) -> None:
        """The run's HTML report, with the sessions' notes and what the fit spent outside its training steps."""
        if not (self.writable and self.reporter.due) or self.exporter.full:  # a full store: warned about already
            return
        outside, advice = self.outside_training()
        text = "\n".join(cb.report() for cb in staging_callbacks(self._trainer()))
        snapshots, unread = self.off.snapshots(self.rank, self.settings.timeout)
        self.reporter.write(self.exporter.results, self.exporter.written, self.recorder.moves, cost=self.cost,
                            notes=[*self._sessions.notes(), *advice, *self.off.notes, *unread], pipeline_text=text,
                            outside=outside, waits=self.recorder.waits, pipeline=self.pipeline(),
                            triggered=self.off.triggered(), snapshots=snapshots)

    def outside_training(self) -> tuple[list[str], list[str]]:
        """What the fit spent outside its training steps (validation, epoch starts, checkpoints), and the advice
        it calls for."""
        if self.loop_time is None:
            return [], []
        try:
            trainer = self._trainer()
            return (self.loop_time.facts(),
                    self.loop_time.advice(trainer_loaders(trainer, "val"), trainer_loaders(trainer, "train")))
        except Exception:  # noqa: BLE001 - a summary line must not end the run
            return [], []

    def summary(self) -> str:
        """The last windows' numbers and top operators, and what went wrong."""
        outside, advice = self.outside_training()
        return self.reporter.summary(
            self.windows(), self.exporter.written, self.recorder.moves, cost=self.cost,
            problems=self.exporter.problems.lines(), outside=[*outside, *advice], distributed=self.distributed,
            reports=[cb.report() for cb in staging_callbacks(self._trainer())], log_dirs=self.loggers.log_dirs(),
            waits=self.recorder.waits, pipeline=self.pipeline(), triggered=self.off.triggered())

    def close(self) -> None:
        """Finish, then stop the exporter's threads and worker, once (the windows stay readable)."""
        if self._closed:
            return
        self._closed = True
        self.off.close()
        self.finish()
        self.exporter.close(self.settings.timeout)
        self.warn_problems()

    def release(self) -> None:
        """For ``__del__``: nothing waits; a window still open is handed over and finished in the background."""
        self.off.close()
        self.end_open_window()
        self.exporter.release()


class _NoWindows:
    """The recorder of no stage: never in a window."""

    watching = False


class NoStage:
    """Before the first setup: the hooks do nothing, and there are no windows."""

    quiet = QuietActions(step_action(""))
    recorder = _NoWindows()
    in_window = False
    distributed: list[DistributedStats] = []
    cost = None
    report_path = None

    def start(self, action: str) -> None: ...

    def stop(self, action: str) -> None: ...

    def failed(self, err: BaseException) -> None: ...

    def windows(self) -> list[WindowResult]:
        return []

    def summary(self) -> str:
        return "StreamProfiler: no window was recorded."

    def finish(self) -> None: ...

    def close(self) -> None: ...

    def release(self) -> None: ...


NO_STAGE = NoStage()
