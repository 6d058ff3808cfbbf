"""A stage's windows off the schedule: the step-time watch (:mod:`.step_watch`), the requests (:mod:`.on_demand`),
the ranks' agreement on them in a multi-rank fit, each slowdown explained against the last normal window, and the
allocator's history over each window (:mod:`.memory_snapshot`). :class:`~.stage.ProfiledStage` owns one
:class:`OffSchedule` and calls it at each step boundary, at the actions that reach it outside a window and for each
analysed window."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from lightning_streamprof.profiling.memory_snapshot import attach_snapshots
from lightning_streamprof.profiling.on_demand import POLL_STEPS, attach_requests
from lightning_streamprof.profiling.step_watch import attach_watch, taints
from lightning_streamprof.results import from_json, to_json
from lightning_streamprof.results.triggers import SLOWDOWN, RunTriggers, SlowdownExplanation, WindowTrigger, explain


class OffSchedule:
    """The watch, the requests and the snapshots of one stage's ``recorder`` (a fit's: the other stages have none).
    ``share`` is the live aggregator of a multi-rank fit (None: a single process, or no exchange)."""

    def __init__(self, settings: Any, recorder: Any, pipelines: Callable[[], Sequence[Any]], *, base: str,
                 run_dir: str, rank: int, world_size: int, fit: bool, share: Any) -> None:
        self.recorder = recorder
        self._share = share if world_size > 1 and settings.request_poll is not None else None
        self.requests, requests_note = attach_requests(settings, base, run_dir, rank, world_size, fit,
                                                       lambda: recorder.next_step, self._share is not None)
        self.watch, watch_note = attach_watch(settings, recorder, pipelines, fit, rank, world_size,
                                              self.requests.offer if self.requests else None)
        self.memory, memory_note = attach_snapshots(settings.memory_snapshot, settings.oom_stacks and fit)
        recorder.memory = self.memory
        self.notes = [n for n in (watch_note, requests_note, memory_note) if n]  # what does not engage, and why
        #: window -> its explanation against the last normal window
        self.explained: dict[int, SlowdownExplanation] = {}
        self._normal: Any = None  # the last normal window's analysis (the exporter keeps the latest only)

    def action(self, action: str) -> None:
        """An action that reaches the stage outside a window: validation, a checkpoint or an epoch's start taints
        the step (the watch leaves it out)."""
        if self.watch is not None and taints(action):
            self.watch.tainted = True

    def at_step(self, guarded: Callable[..., None]) -> None:
        """Before a step starts: a multi-rank fit agrees on rank 0's window every :data:`~.on_demand.POLL_STEPS`
        steps; a single process takes a pending request (each through ``guarded``)."""
        if self._share is not None:
            step = self.recorder.next_step
            if step and step % POLL_STEPS == 0:
                guarded(self._agree, step)
        elif self.requests is not None and self.requests.pending is not None:
            guarded(self._requested)

    def _agree(self, step: int) -> None:
        """Every rank takes rank 0's window off the schedule (a request, or a slowdown its watch saw) at ``step`` and
        places it alike."""
        recorder, requests = self.recorder, self.requests
        mine = requests.take(recorder.offset + step) if requests is not None else None
        data = self._share.broadcast_request(step, to_json(mine) if mine is not None else b"", POLL_STEPS)
        if not data:
            return
        try:
            trigger = from_json(data, WindowTrigger)
        except Exception:  # noqa: BLE001 - a foreign key under our name: no window
            return
        if recorder.request_window(trigger, step, synced=True) and requests is not None:
            requests.done()

    def _requested(self) -> None:
        """A window was asked for: it starts with this step, or once the open window and its export are done."""
        recorder, requests = self.recorder, self.requests
        trigger = requests.take(recorder.offset + recorder.next_step)
        if trigger is not None and recorder.request_window(trigger, recorder.next_step):
            requests.done()

    def analysed(self, window: int, analysis: Any) -> None:
        """An analysed window: a slowdown's is explained against the last normal one, a normal one kept for that."""
        trigger = self.recorder.triggers.get(window)
        if trigger is None or trigger.reason != SLOWDOWN:
            self._normal = analysis
        elif self._normal is not None:
            try:
                self.explained[window] = explain(self._normal, analysis, trigger)
            except Exception as err:  # noqa: BLE001 - an explanation is a courtesy; the run goes on without it
                line = f"window {window} could not be compared with the last normal window: {err!r}"
                if line not in self.notes:
                    self.notes.append(line)

    def triggered(self) -> RunTriggers | None:
        """The windows recorded off the schedule, the slowdowns explained, the stalls and what did not engage
        (None: nothing to say)."""
        watch, triggers = self.watch, self.recorder.triggers
        notes = [*self.notes, *(self.memory.problems if self.memory is not None else [])]
        if watch is None and not triggers and not notes:
            return None
        return RunTriggers(triggers=dict(triggers), explained=[self.explained[w] for w in sorted(self.explained)],
                           stalls=list(watch.stalls) if watch else [], more_stalls=watch.more_stalls if watch else 0,
                           stall_factor=watch.settings.stall_factor if watch else 0.0, notes=notes)

    def snapshots(self, rank: int, timeout: float) -> tuple[list[Any], list[str]]:
        """This rank's memory snapshots, once written (``timeout`` at most), read for the report, and a line for
        each that could not be read."""
        if self.memory is None:
            return [], []
        import msgspec

        from lightning_streamprof.analysis.memory_snapshot import read_snapshots

        self.memory.wait(timeout)
        found, problems = read_snapshots((path, rank, window) for window, path in sorted(self.memory.written.items()))
        peaks = self.memory.peaks
        return [msgspec.structs.replace(m, blocks_peak=peaks.get(m.window)) if m.device == self.memory.device else m
                for m in found], problems

    def out_of_memory(self, run_dir: str, rank: int, step: int,
                      holders: Callable[[], tuple[Any, list[Any]]] | None = None) -> None:
        """An out-of-memory error ends the step: what held the memory (``holders``: the module and its optimizers)
        is written beside the windows, and said in one warning (the exception goes on unchanged)."""
        from lightning_streamprof.profiling.out_of_memory import write_oom_report

        line = write_oom_report(run_dir, rank, step, self.memory is not None and self.memory.recording, holders)
        if line is not None:
            self.notes.append(f"{line} (rank{rank}.out_of_memory.txt in {run_dir})")
            with contextlib.suppress(Exception):  # warnings turned into errors: never a second error on the way out
                warnings.warn(f"StreamProfiler: {self.notes[-1]}", stacklevel=4)

    def close(self) -> None:
        """Stop looking for requests (the signal's earlier handler comes back) and the allocator's light record."""
        if self.requests is not None:
            self.requests.close()
        if self.memory is not None:
            self.memory.end()
