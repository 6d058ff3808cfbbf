"""StreamProfiler: sampled Kineto windows across a whole Lightning run, exported off the hot path.

The class holds Lightning's hooks only; the window schedule and overhead budget (:mod:`.schedule`), the Kineto
session (:mod:`.session`), the export and analysis (:mod:`.exporter`, :mod:`.worker`) are their own modules.
"""

from __future__ import annotations

import math
import os
import socket
import time
import warnings
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from lightning.pytorch.profilers import Profiler
from typing_extensions import override

from lightning_streamprof import names
from lightning_streamprof.profiling.exporter import TraceExporter, WindowResult
from lightning_streamprof.profiling.schedule import OverheadBudget, Phase, Window, WindowSchedule
from lightning_streamprof.profiling.session import Activity, KinetoSession
from lightning_streamprof.profiling.storage import join_path
from lightning_streamprof.report.metrics import headline_metrics
from lightning_streamprof.report.summary import render_windows
from lightning_streamprof.results import TraceIdentity

#: the action that starts a step, per stage (Lightning's loops name it ``[<LoopClass>].<prefix>_next``)
_STEP_ACTIONS = {
    "fit": ".train_dataloader_next",
    "validate": ".val_next",
    "test": ".test_next",
    "predict": ".predict_next",
}
#: steps after a window whose slowdown is charged to it (trace post-processing, export thread)
_COST_TAIL_STEPS = 2


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
    When the window ends the trace is handed to a background thread, which gzips it, writes it as
    ``<dirpath>/<stage>-<time>/w<window>-step<first step>/rank<global rank>.<ns>.pt.trace.json.gz``
    through a temporary name, and a worker process analyses it; :meth:`summary` shows the results.
    The files open in Perfetto, torch-tb-profiler and HTA (``distributedInfo`` is always present).

    Window placement: ``skip_first`` steps are never profiled; then a window starts every ``every``
    steps. With ``max_overhead`` set, each window's measured cost (its steps' slowdown against the median
    unprofiled step, trace start/stop and the export's effect on the following steps) is charged against
    the run: a window is moved to a later grid point until the cost of all windows stays within
    ``max_overhead`` of the training time so far. The default (``every=None``) samples as often as that
    budget allows, so long runs get many windows and short runs few.

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
        max_overhead: Budget for the profiler's share of training time (``0.02`` = 2%), or ``None``.
        record_shapes: Record operator input shapes.
        profile_memory: Record allocations and frees (memory view).
        with_stack: Record Python source locations (hot source lines).
        with_flops: Estimate FLOPs of matrix multiplications and convolutions.
        activities: ``"cpu"``/``"cuda"`` to trace; default CPU plus CUDA when available.
        compress_level: ISA-L gzip level of the written traces (0 fastest .. 3 smallest).
        row_limit: Operators per window shown by :meth:`summary`.
        all_threads: Record the operators of every thread, not only the training loop's (where torch
            supports it). ``None``: on when a callback stages batches on its own thread (a
            :class:`StreamPipeline` with its staging thread), so the trace shows that work.
        analyze: Analyse each window in a worker process and log its headline numbers
            (``streamprof/gpu_utilization``, ``streamprof/sm_efficiency``, ``streamprof/achieved_occupancy``,
            ``streamprof/step_ms`` and ``streamprof/step_ms/<category>``) through the Trainer's loggers.

    Raises:
        ValueError: At construction, for a schedule that cannot work (e.g. ``active=0``).

    Example::

        trainer = Trainer(profiler="streamprof")  # no import needed
        trainer = Trainer(profiler=StreamProfiler(every=500, with_stack=True, dirpath="s3://bucket/prof"))
    """

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        *,
        skip_first: int = 20,
        warmup: int = 2,
        active: int = 3,
        every: int | None = None,
        repeat: int = 0,
        max_overhead: float | None = 0.02,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        activities: list[Activity] | None = None,
        compress_level: int = 2,
        row_limit: int = 10,
        analyze: bool = True,
        all_threads: bool | None = None,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        if every is None and max_overhead is None:
            raise ValueError("StreamProfiler: `every=None` places windows by `max_overhead`; give one of them")
        if max_overhead is not None and not 0 < max_overhead < 1:
            raise ValueError(f"StreamProfiler: `max_overhead` must be in (0, 1), got {max_overhead}")
        if not 0 <= compress_level <= 3:
            raise ValueError(f"StreamProfiler: `compress_level` must be in 0..3 (ISA-L levels), got {compress_level}")
        grid = warmup + active + _COST_TAIL_STEPS if every is None else every
        self.schedule = WindowSchedule(skip_first=skip_first, warmup=warmup, active=active, every=grid, repeat=repeat)
        self.max_overhead = max_overhead
        self.recording_options = {"record_shapes": record_shapes, "profile_memory": profile_memory,
                                  "with_stack": with_stack, "with_flops": with_flops}
        self.activities = activities
        self.compress_level = compress_level
        self.row_limit = row_limit
        self.analyze = analyze
        self.all_threads = all_threads
        self._user_dirpath = dirpath
        self._exporter: TraceExporter | None = None
        self._reset_run_state(stage=None)

    # ------------------------------------------------------------------ lifecycle

    def _reset_run_state(self, stage: str | None) -> None:
        self._step_suffix = _STEP_ACTIONS.get(stage or "", "\0never")
        self._run_dir: str | None = None
        self._run_name: str | None = None
        self._global_rank = 0
        self._world_size = 1
        self._step_offset: int | None = None
        self._next_step = 0  # run-relative index of the step the next boundary starts
        self._window: Window | None = None
        self._window_warmup_start = math.inf  # fast-path copy of self._window.warmup_start
        self._watching = False  # inside a window or its cost tail: full action handling
        self._session: KinetoSession | None = None
        self._step_range: Any = None
        self._open_step = -1
        self._open_ranges: dict[str, list[Any]] = {}
        self._last_boundary: float | None = None
        self._run_start: float | None = None
        self._step_tainted = False
        self._own_time = 0.0
        self._budget = OverheadBudget(self.max_overhead, tail_steps=_COST_TAIL_STEPS)
        self._windows_done = 0
        self._failed = False

    @property
    def _recording(self) -> bool:
        return self._session is not None and self._session.recording

    @override
    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        stage = str(getattr(stage, "value", stage))  # TrainerFn enum -> "fit"
        super().setup(stage=stage, local_rank=local_rank, log_dir=log_dir)
        self._finish()
        self._reset_run_state(stage)
        trainer = self._trainer()
        if trainer is not None:
            self._global_rank = int(getattr(trainer, "global_rank", 0))
            self._world_size = int(getattr(trainer, "world_size", 1))
        base = self._user_dirpath if self._user_dirpath is not None else join_path(log_dir or os.getcwd(), "streamprof")
        self.dirpath = base
        stamp = time.strftime("%Y%m%d-%H%M%S")
        if trainer is not None and self._world_size > 1:
            stamp = trainer.strategy.broadcast(stamp)
        self._run_name = f"{stage}-{stamp}"
        self._run_dir = join_path(str(base), self._run_name)
        if self._exporter is None:
            self._exporter = TraceExporter(compress_level=self.compress_level, analyze=self.analyze)
        self._exporter.check_writable(self._run_dir)
        self._window = self.schedule.window(0)
        self._window_warmup_start = self._window.warmup_start if self._window else math.inf

    def _trainer(self) -> Any:
        module = getattr(self, "_lightning_module", None)
        try:
            return module.trainer if module is not None else None
        except (ReferenceError, RuntimeError, AttributeError):
            return None

    def _staging_callbacks(self) -> list[StagingCallback]:
        trainer = self._trainer()
        return [cb for cb in getattr(trainer, "callbacks", None) or [] if isinstance(cb, StagingCallback)]

    @override
    def describe(self) -> None:
        self._finish()
        super().describe()

    @override
    def teardown(self, stage: str | None) -> None:
        self._finish()
        if getattr(self, "_exporter", None) is not None:
            self._exporter.close()  # stops the analysis worker; a later stage starts a new one
        super().teardown(stage)

    def _finish(self) -> None:
        """Close the open step, export a partly recorded window, wait for pending exports, log them."""
        if getattr(self, "_session", None) is not None:
            self._guarded(self._close_step)
            if self._session is not None:
                self._guarded(self._end_window)
        if getattr(self, "_exporter", None) is not None:
            self._exporter.wait()
            if self._exporter.ready:
                self._log_ready(save=True)

    def _log_ready(self, save: bool = False) -> None:
        """Log analysed windows through the Trainer's loggers (on the training thread)."""
        exporter = self._exporter
        assert exporter is not None
        ready, exporter.ready = exporter.ready, []
        trainer = self._trainer()
        loggers = list(getattr(trainer, "loggers", []) or []) if trainer is not None else []
        for result in ready:
            if result.analysis is None:
                continue
            metrics = headline_metrics(result.analysis)
            for logger in loggers:
                try:
                    logger.log_metrics(metrics, step=result.global_step)
                    if save:
                        logger.save()
                except Exception as err:  # noqa: BLE001
                    warnings.warn(f"StreamProfiler: could not log window metrics: {err}", stacklevel=2)

    # ------------------------------------------------------------------ hot path

    @override
    def start(self, action_name: str) -> None:
        if action_name.endswith(self._step_suffix):
            self._on_step_boundary()
        if self._watching:
            if self._step_range is not None and _ends_training_step(action_name):
                self._step_tainted = True
                self._guarded(self._close_step)
            if self._recording:
                rf = torch.autograd.profiler.record_function(names.pl_range(action_name))
                rf.__enter__()
                self._open_ranges.setdefault(action_name, []).append(rf)

    @override
    def stop(self, action_name: str) -> None:
        if self._watching and self._open_ranges:
            stack = self._open_ranges.get(action_name)
            if stack:
                stack.pop().__exit__(None, None, None)

    def _on_step_boundary(self) -> None:
        if self._exporter is not None and self._exporter.ready:
            self._log_ready()
        now = time.perf_counter()
        step = self._next_step
        self._next_step = step + 1
        last = self._last_boundary
        self._last_boundary = now
        if last is None:
            self._run_start = now
            self._step_offset = self._resume_offset()
        elif not self._watching:
            self._budget.unprofiled_step(now - last)
            if step < self._window_warmup_start:
                return
        else:
            self._charge_step(now - last)
        self._guarded(self._advance, step)

    def _advance(self, step: int) -> None:
        t0 = time.perf_counter()
        self._close_step()
        window = self._window
        if window is not None:
            phase = window.phase(step)
            if phase is not Phase.IDLE and self._session is None and step in (window.warmup_start, window.start):
                self._watching = True
                self._budget.begin_window()
            if phase is Phase.WARMUP and self._session is None:
                self._session = self._new_session()
            elif phase is Phase.ACTIVE:
                if self._session is None:
                    self._session = self._new_session()
                if not self._session.recording:
                    self._session.start(self._window_metadata(window), self._global_rank, self._world_size)
                self._open_step = step
                self._step_range = torch.autograd.profiler.record_function(names.step_name(self._offset + step))
                self._step_range.__enter__()
        self._own_time += time.perf_counter() - t0

    def _close_step(self) -> None:
        if self._step_range is not None:
            self._close_ranges()  # ranges opened inside the step end with it
            self._step_range.__exit__(None, None, None)
            self._step_range = None
            window = self._window
            if window is not None and self._open_step + 1 >= window.stop:
                t0 = time.perf_counter()
                self._end_window()
                self._own_time += time.perf_counter() - t0

    def _close_ranges(self) -> None:
        for stack in self._open_ranges.values():
            while stack:
                stack.pop().__exit__(None, None, None)

    # ------------------------------------------------------------------ windows

    @property
    def _offset(self) -> int:
        return self._step_offset or 0

    def _new_session(self) -> KinetoSession:
        all_threads = self.all_threads
        if all_threads is None:
            all_threads = any(cb.stages_on_thread for cb in self._staging_callbacks())
        return KinetoSession(self.activities, all_threads=all_threads, **self.recording_options)

    def _window_metadata(self, window: Window) -> dict[str, Any]:
        info = {"run": self._run_name, "window": window.index, "first_step": self._offset + window.start,
                "steps": window.stop - window.start, "host": socket.gethostname()}
        return {names.TRACE_METADATA_KEY: info}

    def _end_window(self) -> None:
        """Stop the trace, save it locally (Kineto's writer) and hand it to the export thread."""
        session, window = self._session, self._window
        self._session = None
        self._close_ranges()
        if session is None or window is None:
            return
        if session.recording:
            local = session.save()
            first = self._offset + window.start
            window_dir = join_path(self._run_dir or ".", f"w{window.index:03d}-step{first:07d}")
            identity = TraceIdentity(
                path=join_path(window_dir, f"rank{self._global_rank}.{time.time_ns()}.pt.trace.json.gz"),
                run=self._run_name, window=window.index, first_step=first, rank=self._global_rank,
                world_size=self._world_size, host=socket.gethostname(),
            )
            trainer = self._trainer()
            global_step = int(getattr(trainer, "global_step", 0)) if trainer is not None else 0
            assert self._exporter is not None
            steps = (first, self._offset + min(window.stop, self._next_step))
            self._exporter.submit(local, identity, steps=steps, global_step=global_step)
        else:  # the run ended during warm-up: nothing was recorded
            session.release()
        del session
        self._windows_done += 1
        self._budget.end_window()
        self._place_next_window(current=window.stop if self._open_step < 0 else self._open_step + 1)

    def _charge_step(self, duration: float) -> None:
        """Charge a window or cost-tail step's slowdown to the run."""
        own, self._own_time = self._own_time, 0.0
        self._budget.charge(duration, own, self._step_tainted)
        self._step_tainted = False
        if self._session is None and self._step_range is None and self._budget.tail_step():
            self._watching = False  # the cost tail after a window is over

    def _place_next_window(self, current: int) -> None:
        """Next window on the grid at or after ``current``, later if the overhead budget needs it."""
        elapsed = time.perf_counter() - self._run_start if self._run_start is not None else 0.0
        self._window = self.schedule.window(self._windows_done, not_before=current + self._budget.defer_steps(elapsed))
        self._window_warmup_start = self._window.warmup_start if self._window else math.inf

    def _resume_offset(self) -> int:
        """Global index of the first batch of this run (a resumed fit continues its numbering)."""
        trainer = self._trainer()
        try:
            return int(trainer.fit_loop.epoch_loop.batch_progress.total.ready) if self._step_suffix == _STEP_ACTIONS["fit"] else 0
        except AttributeError:
            return 0

    def _guarded(self, fn: Any, *args: Any) -> None:
        """Profiling problems become one warning; training goes on without further windows."""
        if self._failed:
            return
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - never break the user's training run
            self._failed = True
            warnings.warn(f"StreamProfiler: profiling stopped after an error: {err!r}; training goes on", stacklevel=2)
            self._window = None
            self._window_warmup_start = math.inf
            self._watching = False
            self._step_range = None
            self._open_ranges.clear()
            session, self._session = self._session, None
            if session is not None:
                session.release()

    # ------------------------------------------------------------------ results

    @property
    def windows(self) -> list[WindowResult]:
        """Exported windows so far (waits for pending exports)."""
        if self._exporter is None:
            return []
        self._exporter.wait()
        return self._exporter.results

    @property
    def overhead_seconds(self) -> float:
        """Measured cost of the windows so far, in seconds of training time."""
        return self._budget.total_cost

    @override
    def summary(self) -> str:
        results = self.windows
        text = (
            render_windows(results, rank=self._global_rank, overhead=self.overhead_seconds, row_limit=self.row_limit)
            if results
            else "StreamProfiler: no window was recorded."
        )
        return "\n".join([text, *(cb.report() for cb in self._staging_callbacks())])
