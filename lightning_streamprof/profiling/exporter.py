"""Background export of finished windows: save (Kineto's writer), analyse, add the GPU utilization counter track,
gzip (isal), write through a temporary name.

Three daemon threads. One has Kineto's writer save each stopped trace to a local file, in order and at once (so that
the training thread only stops the session, and a next window or a checkpoint that waits for the save never waits
behind a slow store or analysis); the others start on a window once it is saved: one has each trace analysed in the
worker process, one writes each trace to its target.
A trace that recorded device work is analysed, given its counter track and gzipped in the worker process, and
written once that is done; the write waits for it at most ``timeout`` seconds (then the trace is gzipped here,
without the track, and the analysis still reaches the results when it ends). A trace without device work gets no
track and is gzipped and written at once, so a slow analysis delays no write. Every wait is bounded,
nothing waits in ``__del__``, and a pending export never keeps the process alive: at exit it gets ``timeout``
seconds, then its temporary files are removed. Problems are collected as messages for the training thread to
warn about; the training run never sees an exception from here.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from lightning_streamprof.errors import is_disk_full
from lightning_streamprof.deadline import DeadlineExceeded, call_with_deadline
from lightning_streamprof.profiling.postprocess import gzipped_trace
from lightning_streamprof.profiling.problems import Problems
from lightning_streamprof.profiling.run_dir import make_fresh_dir
from lightning_streamprof.profiling.storage import ensure_dir, remove_local, write_atomic
from lightning_streamprof.profiling.worker import AnalysisError, AnalysisWorker
from lightning_streamprof.profiling.metrics import headline_metrics
from lightning_streamprof.results import Result, TraceIdentity, WindowWay
from lightning_streamprof.words import counted

log = logging.getLogger(__name__)

#: windows listed by :attr:`TraceExporter.results` (the latest); older ones are only counted
KEEP_WINDOWS = 64
#: windows whose full analysis is kept (the latest); older ones keep their headline metrics
KEEP_ANALYSES = 3
#: windows handed over but not yet written; a new window is not recorded while this many wait
MAX_BACKLOG = 2
#: windows waiting for their analysis to start; with one more the oldest is not analysed (bounds the
#: temporary files)
MAX_PENDING_ANALYSES = 4
#: consecutive store time-outs after which no further window is recorded
MAX_STORE_TIMEOUTS = 2


@dataclass(frozen=True)
class WindowResult:
    """One exported window: which steps it recorded, where its trace is, and its headline metrics (the full
    ``analysis`` is kept for the latest windows only); ``pipeline``: the way a staging callback ran its steps."""

    window: int
    first_step: int
    last_step: int
    path: str
    size_bytes: int
    global_step: int = 0
    analysis: Result | None = None
    metrics: dict[str, float] | None = None
    pipeline: WindowWay | None = None


class UnsavedTrace(Protocol):
    """A stopped Kineto trace still to be written to its local file (``session.StoppedTrace``)."""

    local: str

    def save(self) -> None: ...

    def discard(self) -> None: ...


@dataclass(eq=False)
class _Job:
    """One handed-over window; the fields after ``global_step`` change under the exporter's condition."""

    local: str
    identity: TraceIdentity
    steps: tuple[int, int]
    global_step: int
    device: bool = False  # recorded device work: the worker gzips it with its counter track
    written: bool = False  # the write is over (done, failed or abandoned)
    analysed: bool = False  # nothing more comes from the analysis (done, failed, not wanted, dropped, abandoned)
    ok: bool = False  # the trace is at its target and listed in ``results``
    abandoned: bool = False  # given up by finish(): its thread's outcome is dropped
    analysis: Result | None = None
    metrics: dict[str, float] | None = field(default=None, repr=False)
    gz: bytes | None = field(default=None, repr=False)  # the trace as the worker gzipped it, until written
    raw_size: int = 0
    unsaved: UnsavedTrace | None = field(default=None, repr=False)  # Kineto's results, until saved to ``local``
    saved: bool = True  # nothing more to save (saved, failed or discarded)
    save_error: str | None = None


class TraceExporter:
    """Has locally saved Kineto traces analysed and writes them as gzipped files at their target.

    ``results`` lists the latest :data:`KEEP_WINDOWS` written windows, ``written`` counts them all; analysed
    windows are also appended to ``ready`` for the training thread to log.
    """

    def __init__(self, compress_level: int = 2, analyze: bool = True, timeout: float = 30.0) -> None:
        self.compress_level = compress_level
        self.timeout = timeout
        self.results: deque[WindowResult] = deque(maxlen=KEEP_WINDOWS)
        self.ready: list[WindowResult] = []
        self.written = 0
        self.problems = Problems()
        self._worker = AnalysisWorker() if analyze else None
        self._cond = threading.Condition()
        self._saves: deque[_Job] = deque()
        self._writes: deque[_Job] = deque()
        self._analyses: deque[_Job] = deque()
        self._jobs: list[_Job] = []  # handed over and not finished (written and analysed)
        self._store_timeouts = 0
        self._full = False  # a write met a full disk or quota: no further window is recorded
        self._closed = False
        self._threads: list[threading.Thread] = []
        atexit.register(_finish_at_exit, weakref.ref(self))

    # ------------------------------------------------------------------ training thread
    def start_worker(self) -> None:
        """Start the analysis worker now (at setup, while no step runs) rather than at the first window."""
        if self._worker is None:
            return
        try:
            self._worker.start()
        except Exception as err:  # noqa: BLE001 - the first window tries again
            log.debug("streamprof: could not start the analysis worker: %s", err)

    @property
    def busy(self) -> bool:
        """A handed-over window is still being analysed or written."""
        return bool(self._jobs)

    def check_writable(self, directory: str) -> bool:
        """Whether ``directory`` can be created, within ``timeout`` seconds (else a problem is noted)."""
        try:
            call_with_deadline(lambda: ensure_dir(directory), self.timeout, f"the trace directory {directory}")
            return True
        except Exception as err:  # noqa: BLE001
            self.problems.add("setup", f"cannot write traces to {directory}: {_reason(err)}; no window is recorded")
            return False

    def make_run_dir(self, base: str, new_name: Callable[[], str]) -> str | None:
        """A run directory under ``base`` that did not exist before, named by ``new_name()``, made within ``timeout``
        seconds; its name, or None (a problem noted) when none can be made."""
        try:
            return call_with_deadline(lambda: make_fresh_dir(base, new_name), self.timeout,
                                      f"the trace directory {base}")
        except Exception as err:  # noqa: BLE001
            self.problems.add("setup", f"cannot write traces to {base}: {_reason(err)}; no window is recorded")
            return None

    @property
    def accepting(self) -> bool:
        """Whether a new window may be recorded: the store answers, has room, and the backlog is short."""
        return self.refusal is None

    @property
    def full(self) -> bool:
        """A write met a full disk (or quota): the store will not take further windows."""
        return self._full

    @property
    def refusal(self) -> str | None:
        """Why a new window may not be recorded now (None: it may)."""
        with self._cond:
            if self._full:
                return "the trace store is full"
            if self._store_timeouts >= MAX_STORE_TIMEOUTS:
                return "the trace store stopped answering"
            if len(self._writes) >= MAX_BACKLOG:
                return "earlier traces are still being written"
            return None

    def skip(self, trace: str | UnsavedTrace) -> None:
        """Leave a recorded window unwritten (its trace discarded, its temporary file removed) because the exporter
        is not :attr:`accepting`: a multi-rank run records the same windows on every rank, so its recorder skips a
        window here, after recording it, rather than before."""
        if isinstance(trace, str):
            remove_local(trace)
        else:
            trace.discard()
        self.skipped()

    def skipped(self) -> None:
        """Count a window skipped because the exporter was not :attr:`accepting` (warned about once)."""
        reason = self.refusal or "earlier traces are still being written"
        self.problems.add("skipped", f"a window was skipped: {reason}")

    def submit(self, trace: str | UnsavedTrace, identity: TraceIdentity, *, steps: tuple[int, int],
               global_step: int = 0, device_work: bool = False) -> None:
        """Export a window's trace to ``identity.path`` (the window's recorded ``steps``: first, past-the-end):
        ``trace`` is the local file it was saved to, or a stopped trace that the save thread saves first;
        ``device_work``: the session recorded a device's activity."""
        unsaved = None if isinstance(trace, str) else trace
        local = trace if isinstance(trace, str) else trace.local
        with self._cond:
            if self._closed:
                if unsaved is not None:
                    unsaved.discard()
                remove_local(local)
                return
            self._start_threads()
            job = _Job(local, identity, steps, global_step, device=device_work, analysed=self._worker is None,
                       unsaved=unsaved, saved=unsaved is None)
            dropped = None
            if self._worker is not None:
                if len(self._analyses) >= MAX_PENDING_ANALYSES:
                    dropped = self._analyses.popleft()
                    dropped.analysed = True
                self._analyses.append(job)
            if unsaved is not None:
                self._saves.append(job)
            self._writes.append(job)
            self._jobs.append(job)
            self._cond.notify_all()
        if dropped is not None:
            self.problems.add("analysis-behind", "analysis fell behind training; a window was not analysed")
            self._settle(dropped)

    def wait_saved(self, timeout: float | None = None) -> bool:
        """Wait until every handed-over window's trace is saved by Kineto's writer (a new session may then claim
        Kineto); False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: all(job.saved for job in self._jobs), timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every handed-over window is written and analysed; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs, timeout)

    def finish(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds; windows still pending then are abandoned (their temporary files
        removed, a problem noted). True when nothing was abandoned."""
        if self.wait(timeout):
            return True
        with self._cond:
            pending, self._jobs = self._jobs, []
            self._saves.clear()
            self._writes.clear()
            self._analyses.clear()
            unwritten = sum(1 for j in pending if not j.written)
            unanalysed = sum(1 for j in pending if j.written and not j.analysed)
            unsaved = [job.unsaved for job in pending if job.unsaved is not None]  # not those the save thread has
            for job in pending:
                job.abandoned = job.written = job.analysed = True
                job.gz = job.unsaved = None
            idle = self._closed
            self._cond.notify_all()
        for trace in unsaved:
            trace.discard()
        for job in pending:
            remove_local(job.local)
        if unwritten:
            self.problems.add("abandoned", f"{counted(unwritten, 'window')} not written within {timeout:g} s; abandoned")
        if unanalysed:
            self.problems.add("unanalysed", f"analysis of {counted(unanalysed, 'window')} not finished within {timeout:g} s")
        if idle and self._worker is not None:
            self._worker.close(wait=False)
        return False

    def close(self, timeout: float | None = None) -> None:
        """Finish (bounded by ``timeout``) and stop the threads and the analysis worker."""
        self.finish(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._worker is not None:
            self._worker.close(wait=bool(timeout))

    def release(self) -> None:
        """Accept no more windows; what is pending finishes in the background, then the worker stops. Never
        waits (for ``__del__``)."""
        with self._cond:
            self._closed = True
            idle = not self._jobs
            self._cond.notify_all()
        if idle and self._worker is not None:
            self._worker.close(wait=False)

    # ------------------------------------------------------------------ threads
    def _start_threads(self) -> None:
        if self._threads:
            return
        loops = [("save", self._save_loop), ("write", self._write_loop)]
        if self._worker is not None:
            loops.append(("analyse", self._analysis_loop))
        for name, loop in loops:
            thread = threading.Thread(target=loop, name=f"streamprof-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _take(self, queue: deque[_Job]) -> _Job | None:
        """The next job of ``queue``; None once closed with nothing left to do."""
        with self._cond:
            self._cond.wait_for(lambda: queue or (self._closed and not self._jobs))
            return queue.popleft() if queue else None

    def _settle(self, job: _Job) -> None:
        """Once ``job`` is written and analysed: it is finished and its temporary file goes (the worker stops
        when the exporter is closed and idle)."""
        with self._cond:
            if not (job.written and job.analysed) or job not in self._jobs:
                return
            remove_local(job.local)  # before a waiter sees the window finished
            self._jobs.remove(job)
            idle = self._closed and not self._jobs
            self._cond.notify_all()
        if idle and self._worker is not None:
            self._worker.close(wait=False)

    def _save_loop(self) -> None:
        while (job := self._take(self._saves)) is not None:
            with self._cond:  # the trace is this thread's from here on, or finish() has discarded it
                trace, job.unsaved = job.unsaved, None
            if trace is not None:
                try:
                    trace.save()
                except BaseException as err:  # noqa: BLE001 - a thread must not die
                    job.save_error = _reason(err)
                    if not job.abandoned:
                        self.problems.add("export", f"window {job.identity.window} not written: {job.save_error}")
            with self._cond:
                job.saved = True
                abandoned = job.abandoned
                self._cond.notify_all()
            if abandoned:  # given up while Kineto's writer ran: its file goes with it
                remove_local(job.local)

    def _saved(self, job: _Job) -> bool:
        """Wait until the job's trace is in its local file (the save thread's); whether it is."""
        with self._cond:
            self._cond.wait_for(lambda: job.saved or job.abandoned)
        return job.save_error is None and not job.abandoned

    def _write_loop(self) -> None:
        while (job := self._take(self._writes)) is not None:
            try:
                if self._saved(job):
                    self._write(job)
            except BaseException as err:  # noqa: BLE001 - a thread must not die
                if not job.abandoned:
                    self.problems.add("write", f"could not write {job.identity.path}: {_reason(err)}")
            finally:
                with self._cond:
                    job.written = True
                    if not job.ok and job in self._analyses:  # an unwritten window is not analysed
                        self._analyses.remove(job)
                        job.analysed = True
                self._settle(job)

    def _write(self, job: _Job) -> None:
        target = job.identity.path
        data, size = None, 0
        if job.device and self._worker is not None:
            with self._cond:  # the worker gzips it with the counter track of its analysis
                if not self._cond.wait_for(lambda: job.analysed or job.abandoned, self.timeout):
                    log.debug("streamprof: %s written without its counter track (analysis not done in %g s)",
                              target, self.timeout)
                data, size, job.gz = job.gz, job.raw_size, None
        if data is None:
            with open(job.local, "rb") as f:
                raw = f.read()
            size = len(raw)
            data = gzipped_trace(raw, self.compress_level)
            del raw
        try:
            call_with_deadline(lambda: write_atomic(target, data), self.timeout, f"the trace store ({target})")
        except DeadlineExceeded as err:
            with self._cond:
                self._store_timeouts += 1
            self.problems.add("store-timeout", f"window {job.identity.window} not written: {err}")
            return
        except Exception as err:  # noqa: BLE001
            if is_disk_full(err):
                with self._cond:
                    self._full = True
                self.problems.add("full", f"could not write {target}: {_reason(err)}; no further window is recorded")
            else:
                self.problems.add("write", f"could not write {target}: {_reason(err)}")
            return
        with self._cond:
            self._store_timeouts = 0
            self.written += 1
            job.ok = True
            self._listed(WindowResult(job.identity.window or 0, job.steps[0], job.steps[1] - 1, target, size,
                                      job.global_step, job.analysis, job.metrics, job.identity.pipeline))
        log.debug("streamprof: wrote %s (%d bytes)", target, size)

    def _analysis_loop(self) -> None:
        while (job := self._take(self._analyses)) is not None:
            analysis, metrics, gz, raw_size = None, None, None, 0
            try:
                if self._saved(job):
                    analysis, metrics, gz, raw_size = self._analyse(job)
            except BaseException as err:  # noqa: BLE001 - a thread must not die
                if not job.abandoned:
                    self.problems.add("analysis", f"could not analyse window {job.identity.window}: {_reason(err)}")
            finally:
                with self._cond:
                    if not job.abandoned:
                        job.analysis, job.metrics, job.analysed = analysis, metrics, True
                        if not job.written:
                            job.gz, job.raw_size = gz, raw_size
                        if job.ok and analysis is not None:  # written before its analysis ended
                            self._attach(job)
                    self._cond.notify_all()
                self._settle(job)

    def _analyse(self, job: _Job) -> tuple[Result | None, dict[str, float] | None, bytes | None, int]:
        """The window's analysis and headline metrics, and (a trace with device work) the trace gzipped with its
        counter track, from the worker."""
        assert self._worker is not None
        try:
            done = self._worker.analyze(job.local, job.identity, self.compress_level if job.device else None)
        except AnalysisError as err:
            if not job.abandoned:
                self.problems.add("analysis", f"could not analyse window {job.identity.window}: {err}")
            return None, None, None, 0
        if done.analysis is None:
            if not job.abandoned:
                self.problems.add("analysis", f"could not analyse window {job.identity.window}: {done.error}")
            return None, None, done.gz, done.raw_size
        for problem in done.analysis.warnings:
            self.problems.add("trace", problem)
        return done.analysis, headline_metrics(done.analysis), done.gz, done.raw_size

    # ------------------------------------------------------------------ results (under the condition)
    def _listed(self, result: WindowResult) -> None:
        """A written window joins ``results`` (and ``ready`` when analysed)."""
        self.results.append(result)
        if result.analysis is not None:
            self.ready.append(result)
            self._keep_latest_analyses()

    def _attach(self, job: _Job) -> None:
        """The analysis of a window written before it ended joins that window's entry of ``results``."""
        for i in range(len(self.results) - 1, -1, -1):
            if self.results[i].path == job.identity.path:
                res = self.results[i] = replace(self.results[i], analysis=job.analysis, metrics=job.metrics)
                self.ready.append(res)
                break
        self._keep_latest_analyses()

    def _keep_latest_analyses(self) -> None:
        """Only the latest :data:`KEEP_ANALYSES` analysed windows keep their full analysis."""
        kept = 0
        for i in range(len(self.results) - 1, -1, -1):
            res = self.results[i]
            if res.analysis is None:
                continue
            kept += 1
            if kept > KEEP_ANALYSES:
                self.results[i] = replace(res, analysis=None)


def _finish_at_exit(ref: weakref.ref) -> None:
    """At interpreter exit: pending exports get the exporter's timeout, then their temporary files go."""
    exporter = ref()
    if exporter is not None:
        exporter.close(exporter.timeout)


def _reason(err: BaseException) -> str:
    from lightning_streamprof.errors import describe

    return describe(err)


