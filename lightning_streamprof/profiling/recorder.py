"""The windows of one stage, step by step: which steps are recorded, their ranges, each window's Kineto session
and the hand-over of its trace to the exporter, and the step times the overhead budget charges.

Every step starts with :meth:`WindowRecorder.step_boundary`, which reads the clock once; between windows that is
all (the step's time joins the budget's baseline of unprofiled steps). A window warms up for ``warmup`` steps
(CUPTI's start-up is not recorded), then records ``active`` steps, each in a ``ProfilerStep#N`` range (``N`` the
global batch index) with Lightning's actions in ``[pl][profile]<action>`` ranges; validation, a checkpoint or an
epoch's end inside a step ends that step (its slowdown is not charged). When the window ends the training thread
only stops the trace; the exporter's threads save, analyse and write it. From a window's first warm-up step until
its export is done, every step is charged (:class:`~.schedule.OverheadBudget`). Whether a window begins at the step
the schedule placed it on is :meth:`WindowRecorder._admit`'s decision, and only its: a staging callback still making
its first choice of way holds it (:data:`~.schedule.CHOICE_WAIT`), the overhead budget moves it. A window records the
way a staging callback ran its steps (:class:`~.pipeline_view.WayLog`) in its trace's metadata and its identity.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from lightning_streamprof import names
from lightning_streamprof.profiling.exporter import TraceExporter
from lightning_streamprof.profiling.memory_snapshot import snapshot_name
from lightning_streamprof.profiling.pipeline_view import WayLog, choosing
from lightning_streamprof.profiling.schedule import CHOICE_WAIT, OverheadBudget, Phase, Window, WindowSchedule
from lightning_streamprof.profiling.session import KinetoSession, SessionBusy, Unrecorded
from lightning_streamprof.profiling.storage import join_path
from lightning_streamprof.results import ChoiceWait, TraceIdentity, WindowWay, to_builtins
from lightning_streamprof.results.triggers import REFERENCE, SLOWDOWN, WindowTrigger

#: a reference window is not placed when the next scheduled window starts within this many steps
SOON = 100


class WindowRecorder:
    """Steps a stage through its windows; :meth:`step_boundary` is called at the start of every step.

    Between windows a boundary only counts the step (and times it for the budget's baseline). From a window's
    first warm-up step until its trace is exported and analysed, every step is charged to the budget; recorded
    steps get a ``ProfilerStep#N`` range (``N`` = ``offset`` + run-relative index) and Lightning's actions their
    ``[pl][profile]`` ranges. ``clock`` gives seconds (``time.perf_counter``; tests inject theirs). ``pipelines()``
    gives the staging callbacks that say what they do through a ``state`` (read only when a window is due or
    recording).
    """

    def __init__(
        self,
        schedule: WindowSchedule,
        budget: OverheadBudget,
        exporter: TraceExporter,
        new_session: Callable[[], KinetoSession],
        global_step: Callable[[], int],
        *,
        run_name: str,
        run_dir: str,
        rank: int,
        world_size: int,
        agree: Callable[[int, int], int] | None = None,
        on_window_end: Callable[[int, int, int | None, str], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        pipelines: Callable[[], Sequence[Any]] = tuple,
    ) -> None:
        self.schedule, self.budget, self.exporter = schedule, budget, exporter
        self._new_session = new_session
        self._global_step = global_step  # the trainer's, recorded with each window's result
        self.run_name, self.run_dir = run_name, run_dir
        self.rank, self.world_size = rank, world_size
        # distributed runs: every rank's deferral of the next window agreed (window index, steps) -> steps, and
        # told of each recorded window (index, stop, next window's start, window directory)
        self._agree, self._on_window_end = agree, on_window_end
        self._clock = clock
        self._pipelines = pipelines
        self.offset = 0  # global index of the run's first step (a resumed fit continues its numbering)
        self.watching = False  # inside a window or while its export runs: full action handling, steps charged
        self._window: Window | None = schedule.window(0)
        self._warmup_start = self._window.warmup_start if self._window else math.inf
        self._session: KinetoSession | Unrecorded | None = None
        #: seconds of the first recorded window's Kineto calls in the training thread: prepare, start, stop
        self.first_window_calls: dict[str, float] = {}
        self._step_range: Any = None
        self._open_step = -1
        self._next_step = 0
        self._open_ranges: dict[str, list[Any]] = {}
        self._last_boundary: float | None = None
        self._run_start: float | None = None
        self._tainted = False
        self._own_time = 0.0
        self._timing = False  # inside a timed part of the profiler's own work (nested parts are not counted twice)
        self._windows_done = 0
        #: window index -> the first step it would have recorded had the overhead budget not moved it
        self.moves: dict[int, int] = {}
        #: window index -> how long it waited for a staging callback's first choice of way
        self.waits: dict[int, ChoiceWait] = {}
        self._held: tuple[int, str] | None = None  # the held window's planned start and whom it waits for
        self._ways = WayLog()  # the open window's ways
        #: the step-time watch (:class:`~.step_watch.StepWatch`), fed each unprofiled step; None: no watch
        self.watch: Any = None
        #: window index -> why it was recorded off the schedule (a slowdown, a request)
        self.triggers: dict[int, WindowTrigger] = {}
        self._trigger: WindowTrigger | None = None  # the placed window's, until it ends
        self._normal_windows = 0  # windows recorded that no slowdown triggered
        #: the allocator's history over each window (:class:`~.memory_snapshot.MemorySnapshots`); None: not recorded
        self.memory: Any = None

    @property
    def recording(self) -> bool:
        return self._session is not None and self._session.recording

    @property
    def in_step(self) -> bool:
        return self._step_range is not None

    @property
    def next_step(self) -> int:
        """Run-relative index of the step the next boundary starts (the same on every rank)."""
        return self._next_step

    @property
    def active(self) -> bool:
        """A session is prepared or recording."""
        return self._session is not None

    # ------------------------------------------------------------------ steps and ranges
    @property
    def training_seconds(self) -> float:
        """Seconds from the first step's start to the latest step's start."""
        if self._run_start is None or self._last_boundary is None:
            return 0.0
        return self._last_boundary - self._run_start

    def step_boundary(self, first: Callable[[], int]) -> None:
        """A step starts (``first()`` gives the global index of the run's first step, asked once)."""
        now = self._clock()
        step = self._next_step
        self._next_step = step + 1
        last, self._last_boundary = self._last_boundary, now
        if last is None:
            self._run_start = now
            self.offset = first()
        elif not self.watching:
            self.budget.unprofiled_step(now - last)
            if self.watch is not None:
                self.watch.add(now - last, step - 1)
            if step < self._warmup_start:
                return
        else:
            self._charge(now - last)
        self._timed(self._advance, step)

    def _timed(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn``, adding its time to the profiler's own time of this step (once, however nested)."""
        if self._timing:
            fn(*args)
            return
        self._timing = True
        t0 = self._clock()
        try:
            fn(*args)
        finally:
            self._own_time += self._clock() - t0
            self._timing = False

    def open_range(self, action: str) -> None:
        rf = torch.autograd.profiler.record_function(names.pl_range(action))
        rf.__enter__()
        self._open_ranges.setdefault(action, []).append(rf)

    def close_range(self, action: str) -> None:
        stack = self._open_ranges.get(action)
        if stack:
            stack.pop().__exit__(None, None, None)

    def end_step_early(self) -> None:
        """Validation, a checkpoint or an epoch end starts inside a step: the step ends here, and its slowdown
        is not charged (the step is not a plain training step)."""
        self._tainted = True
        self.close_step()

    def close_step(self) -> None:
        """Close the open step (and the ranges opened in it); the window ends with its last step."""
        if self._step_range is None:
            return
        self._close_ranges()
        self._step_range.__exit__(None, None, None)
        self._step_range = None
        window = self._window
        if window is not None and self._open_step + 1 >= window.stop:
            self._timed(self.end_window)

    def _close_ranges(self) -> None:
        for stack in self._open_ranges.values():
            while stack:
                stack.pop().__exit__(None, None, None)

    def _advance(self, step: int) -> None:
        self.close_step()
        window = self._window
        if window is None:
            return
        phase = window.phase(step)
        if phase is not Phase.IDLE and self._session is None and step in (window.warmup_start, window.start):
            if not self._admit(step):
                return
            self.watching = True
            self.budget.begin_window()
            if self.memory is not None:
                self.memory.start()
        if phase is Phase.WARMUP and self._session is None:
            self._session = self._call("prepare", self._open_session)
        elif phase is Phase.ACTIVE:
            if self._session is None:
                self._session = self._call("prepare", self._open_session)
            if step == window.start:
                self._ways = WayLog()
            self._ways.add(self._pipelines())  # the way this step runs: the trace's metadata starts with it
            if isinstance(self._session, KinetoSession) and not self._session.recording:
                try:
                    self._call("start", self._session.start, self._metadata(window, self._ways.result()), self.rank,
                               self.world_size)
                except SessionBusy as err:
                    self._session = self._unrecorded(err)
            self._open_step = step
            if not self._session.recording:  # nothing of ours enters another session's trace
                if step + 1 >= window.stop:
                    self.end_window()
                return
            self._step_range = torch.autograd.profiler.record_function(names.step_name(self.offset + step))
            self._step_range.__enter__()

    def _admit(self, step: int) -> bool:
        """Whether the window placed at ``step`` begins now; if not, it is skipped or placed later. Every condition
        on a window's start is here. Earlier windows still being written, or a store that is gone, skip it (a full
        store ends profiling); the overhead budget moves it to a later grid point. Not in a multi-rank run, whose
        windows are placed alike on every rank: there a window is recorded and left unwritten, and the ranks agree on
        the budget's moves when the window before ends. A staging callback's first choice of way holds a window in
        every run: ``auto`` chooses at the same step on every rank (its timings are averaged across them)."""
        if self._wait_for_choice(step):
            return False
        if self._agree is not None:
            return True
        if not self.exporter.accepting:
            if self.exporter.full:
                self.stop()
            else:
                self.exporter.skipped()
                self._place_next(current=step + 1)
            return False
        return not self._over_budget(step)

    def _wait_for_choice(self, step: int) -> bool:
        """While a staging callback has not made its first choice of way (``state.deciding``), the window placed at
        ``step`` waits a step at a time, so that it records the way the run settles on; at most
        :data:`~.schedule.CHOICE_WAIT` steps past the start the schedule gave it, then it records anyway. True while it
        waits; how long it waited is kept in :attr:`waits`."""
        window = self._window
        if window is None:
            return False
        who = choosing(self._pipelines())
        planned = self._held[0] if self._held is not None else window.start
        start = step + 1 + window.start - window.warmup_start  # the window's first recorded step after one more
        if who is not None and start - planned <= CHOICE_WAIT:
            self._held = (planned, who)
            self._window = _moved(window, step + 1)
            self._warmup_start = step + 1
            return True
        if self._held is not None:
            planned, waited_for = self._held
            self._held = None
            self.waits[window.index] = ChoiceWait(
                window=window.index, planned=self.offset + planned, first_step=self.offset + window.start,
                waited_for=waited_for, bound=CHOICE_WAIT if who is not None else None)
        return False

    def _call(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, its seconds kept in :attr:`first_window_calls` until the first window has ended."""
        if self._windows_done:
            return fn(*args)
        t0 = self._clock()
        try:
            return fn(*args)
        finally:
            self.first_window_calls[name] = self.first_window_calls.get(name, 0.0) + self._clock() - t0

    def _open_session(self) -> KinetoSession | Unrecorded:
        """The window's Kineto session, or :class:`Unrecorded` while another session holds Kineto (an earlier
        window's trace still being saved is waited for: that takes a fraction of a step)."""
        if not self.exporter.wait_saved(self.exporter.timeout):
            return self._unrecorded(SessionBusy(f"the previous window's trace was still being saved after"
                                                f" {self.exporter.timeout:g} s"))
        try:
            return self._new_session()
        except SessionBusy as err:
            return self._unrecorded(err)

    def _unrecorded(self, err: SessionBusy) -> Unrecorded:
        """The window goes by unrecorded (so windows stay placed alike on every rank); one warning says why."""
        self.exporter.problems.add("busy", f"a window was not recorded: {err}")
        return Unrecorded()

    # ------------------------------------------------------------------ windows
    def _metadata(self, window: Window, ways: WindowWay | None) -> dict[str, Any]:
        """The trace's ``streamprof`` entry: run, window, first step, steps, host, and the ways a staging callback ran
        its steps (``pipeline``)."""
        info: dict[str, Any] = {"run": self.run_name, "window": window.index, "first_step": self.offset + window.start,
                                "steps": window.stop - window.start, "host": socket.gethostname()}
        if ways is not None:
            info["pipeline"] = to_builtins(ways)
        if self._trigger is not None:
            info["trigger"] = to_builtins(self._trigger)
        return {names.TRACE_METADATA_KEY: info}

    def end_window(self) -> None:
        """Stop the trace and hand it to the export threads, which save it (Kineto's writer), analyse and write it."""
        session, window = self._session, self._window
        self._session = None
        self._close_ranges()
        if session is None or window is None:
            return
        recorded = session.recording
        first = self.offset + window.start
        window_dir = join_path(self.run_dir, f"w{window.index:03d}-step{first:07d}")
        ways, self._ways = self._ways.result(), WayLog()
        trigger = self._trigger
        if self.memory is not None:
            self.memory.stop(window.index, join_path(window_dir, snapshot_name(self.rank)) if recorded else None)
        if recorded:
            if ways is not None and (len(ways.ways) > 1 or ways.in_trials != ways.first.in_trials):
                session.add_metadata(self._metadata(window, ways))  # the steps after the first ran other ways
            stopped = self._call("stop", session.stop)
            identity = TraceIdentity(
                path=join_path(window_dir, f"rank{self.rank}.{time.time_ns()}.pt.trace.json.gz"), run=self.run_name,
                window=window.index, first_step=first, rank=self.rank, world_size=self.world_size,
                host=socket.gethostname(), pipeline=ways, trigger=trigger,
            )
            steps = (first, self.offset + min(window.stop, self._next_step))
            if self._agree is not None and not self.exporter.accepting:
                self.exporter.skip(stopped)
            else:
                self.exporter.submit(stopped, identity, steps=steps, global_step=self._global_step(),
                                     device_work=bool(getattr(session, "records_device", False)))
        else:  # the run ended during warm-up, or another session held Kineto: nothing was recorded
            session.release()
        self._trigger = None
        if trigger is not None:
            self.triggers[window.index] = trigger
        if recorded and (trigger is None or trigger.reason != SLOWDOWN):
            self._normal_windows += 1
        self._windows_done += 1
        self.budget.end_window()
        self._place_next(current=window.stop if self._open_step < 0 else self._open_step + 1)
        if recorded and self._on_window_end is not None:
            self._on_window_end(window.index, window.stop, self._window.start if self._window else None, window_dir)

    def _charge(self, seconds: float) -> None:
        """Charge the step that just ended to the budget: a window's step, or one while its export runs; the charge
        period ends once the exports are done."""
        own, self._own_time = self._own_time, 0.0
        if self._session is not None or self._step_range is not None:
            self.budget.window_step(seconds, own, self._tainted)
        else:
            self.budget.tail_step(seconds, own, self._tainted)
            if self.budget.tail_done and not self.exporter.busy:
                self.budget.end_period()
                self.watching = False
        self._tainted = False

    def _over_budget(self, step: int) -> bool:
        """At a window's first step, with a budget: move it to a later grid point while an earlier window's export
        runs or the cost so far is over budget. True when it moved."""
        if self.budget.max_overhead is None or self._window is None:
            return False
        defer = 1 if self.exporter.busy else self.budget.defer_steps(self.training_seconds)
        if defer <= 0:
            return False
        planned = self._window
        if self._trigger is not None:  # a window off the schedule waits, then records
            moved = _moved(planned, step + defer)
        else:
            moved = self.schedule.window(self._windows_done, not_before=step + defer)
        self._window = moved
        self._warmup_start = moved.warmup_start if moved is not None else math.inf
        if moved is not None and moved.start != planned.start:
            self.moves.setdefault(moved.index, self.offset + planned.start)
        return True

    def _place_next(self, current: int) -> None:
        """Next window on the grid at or after ``current``, later if the overhead budget needs it."""
        defer = self.budget.defer_steps(self.training_seconds)
        if self._agree is not None:
            defer = self._agree(self._windows_done - 1, defer)
        self._window = self.schedule.window(self._windows_done, not_before=current + defer)
        if defer and self._window is not None:
            planned = self.schedule.window(self._windows_done, not_before=current)
            if planned is not None and planned.start != self._window.start:
                self.moves[self._window.index] = self.offset + planned.start
        self._warmup_start = self._window.warmup_start if self._window else math.inf

    def stop(self) -> None:
        """After an error: no further window; the session, if any, is released without saving."""
        self._window = None
        self._warmup_start = math.inf
        self.watching = False
        self._trigger = None
        self.watch = None
        if self.memory is not None:
            self.memory.stop(-1, None)
        self._step_range = None
        self._open_ranges.clear()
        session, self._session = self._session, None
        if session is not None:
            session.release()

    # ------------------------------------------------------------------ windows off the schedule
    def request_window(self, trigger: WindowTrigger, step: int | None = None, synced: bool = False) -> bool:
        """Record a window from ``step`` (run-relative; None: the step now starting), whatever the schedule, for
        ``trigger`` (it takes the place of the next scheduled window; the overhead budget may make it wait). False
        while a window is open or placed off the schedule, while its export runs, and for a reference window once a
        normal window was recorded. A multi-rank run, whose windows every rank places alike, takes only requests
        that every rank makes at the same step (``synced``), and refuses them by what is alike on every rank: a
        window open, placed off the schedule or already warming up."""
        step = self._next_step - 1 if step is None else step
        if self._refreshed(trigger, synced):
            return True
        if self._session is not None or self._trigger is not None:
            return False
        if synced:  # every rank asks at the same step: only what is alike on every rank may refuse
            if self._window is not None and self._window.warmup_start <= step:
                return False
        elif self.watching or self._agree is not None:
            return False
        if trigger.reason == REFERENCE and self._normal_windows:
            return False
        if trigger.reason == REFERENCE and self._window is not None and self._window.warmup_start - step <= SOON:
            return False  # the next scheduled window comes soon enough
        warmup, active = self.schedule.warmup, self.schedule.active
        self._window = Window(index=self._windows_done, warmup_start=step, start=step + warmup,
                              stop=step + warmup + active)
        self._warmup_start = step
        self._trigger = trigger
        return True

    def _refreshed(self, trigger: WindowTrigger, synced: bool) -> bool:
        """A new slowdown while a slowdown's window waits for the overhead budget (not yet warming up): the window
        records for the new one, which is what it will see, at the place it waits for."""
        waiting = self._trigger is not None and self._session is None and not self.watching
        if not (waiting and trigger.reason == SLOWDOWN == self._trigger.reason) or synced or self._agree is not None:
            return False
        self._trigger = trigger
        return True


def _moved(window: Window, warmup_start: int) -> Window:
    """``window`` warming up from ``warmup_start`` instead, its lengths kept."""
    start = warmup_start + window.start - window.warmup_start
    return dataclasses.replace(window, warmup_start=warmup_start, start=start, stop=start + window.stop - window.start)
