"""Background export of finished windows: gzip (isal), write through a temporary name, analyse.

Two daemon threads: one writes each trace to its target (so writes keep up with training), one has it analysed
in the worker process (a slow analysis delays no write). Every wait is bounded, nothing waits in ``__del__``,
and a pending export never keeps the process alive: at exit it gets ``timeout`` seconds, then its temporary
files are removed. Problems are collected as messages for the training thread to warn about; the training run
never sees an exception from here.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections import deque
from dataclasses import dataclass, replace

from isal import igzip

from lightning_streamprof.profiling.deadline import DeadlineExceeded, call_with_deadline
from lightning_streamprof.profiling.problems import Problems
from lightning_streamprof.profiling.storage import ensure_dir, write_atomic
from lightning_streamprof.profiling.worker import AnalysisError, AnalysisWorker
from lightning_streamprof.report.metrics import headline_metrics
from lightning_streamprof.results import Result, TraceIdentity

log = logging.getLogger(__name__)

#: windows listed by :attr:`TraceExporter.results` (the latest); older ones are only counted
KEEP_WINDOWS = 64
#: windows whose full analysis is kept (the latest); older ones keep their headline metrics
KEEP_ANALYSES = 3
#: windows handed over but not yet written; a new window is not recorded while this many wait
MAX_BACKLOG = 2
#: windows written and waiting for analysis; with one more the oldest is not analysed (bounds the temporary files)
MAX_PENDING_ANALYSES = 4
#: consecutive store time-outs after which no further window is recorded
MAX_STORE_TIMEOUTS = 2


@dataclass(frozen=True)
class WindowResult:
    """One exported window: which steps it recorded, where its trace is, and its headline metrics (the full
    ``analysis`` is kept for the latest windows only)."""

    window: int
    first_step: int
    last_step: int
    path: str
    size_bytes: int
    global_step: int = 0
    analysis: Result | None = None
    metrics: dict[str, float] | None = None


@dataclass(frozen=True)
class _Job:
    local: str
    identity: TraceIdentity
    steps: tuple[int, int]
    global_step: int


class TraceExporter:
    """Writes locally saved Kineto traces as gzipped files at their target and has them analysed.

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
        self._writes: deque[_Job] = deque()
        self._analyses: deque[_Job] = deque()
        self._in_flight: set[str] = set()  # "<local file>.<write|analyse>" of jobs taken by a thread
        self._abandoned: set[str] = set()  # local files of in-flight jobs given up by finish()
        self._busy = 0  # jobs handed over and not finished
        self._store_timeouts = 0
        self._closed = False
        self._threads: list[threading.Thread] = []
        atexit.register(_finish_at_exit, weakref.ref(self))

    # ------------------------------------------------------------------ training thread
    def check_writable(self, directory: str) -> bool:
        """Whether ``directory`` can be created, within ``timeout`` seconds (else a problem is noted)."""
        try:
            call_with_deadline(lambda: ensure_dir(directory), self.timeout, f"the trace directory {directory}")
            return True
        except Exception as err:  # noqa: BLE001
            self.problems.add("setup", f"cannot write traces to {directory}: {_reason(err)}; no window is recorded")
            return False

    @property
    def accepting(self) -> bool:
        """Whether a new window may be recorded: the store answers and the backlog is short."""
        with self._cond:
            return self._store_timeouts < MAX_STORE_TIMEOUTS and len(self._writes) < MAX_BACKLOG

    def submit(self, local_path: str, identity: TraceIdentity, *, steps: tuple[int, int], global_step: int = 0) -> None:
        """Export the trace saved at ``local_path`` to ``identity.path`` (the window's recorded ``steps``:
        first, past-the-end)."""
        with self._cond:
            if self._closed:
                _remove(local_path)
                return
            self._start_threads()
            self._writes.append(_Job(local_path, identity, steps, global_step))
            self._busy += 1
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every handed-over window is written and analysed; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout)

    def finish(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds; windows still pending then are abandoned (their temporary files
        removed, a problem noted). True when nothing was abandoned."""
        if self.wait(timeout):
            return True
        with self._cond:
            pending = list(self._writes) + list(self._analyses)
            unwritten = len(self._writes) + sum(1 for j in self._in_flight if j.endswith(".write"))
            unanalysed = len(self._analyses) + sum(1 for j in self._in_flight if j.endswith(".analyse"))
            self._writes.clear()
            self._analyses.clear()
            in_flight = [p.rsplit(".", 1)[0] for p in self._in_flight]
            self._abandoned.update(in_flight)
            self._busy -= len(pending) + len(in_flight)
        for path in [j.local for j in pending] + in_flight:
            _remove(path)
        if unwritten:
            self.problems.add("abandoned", f"{unwritten} window(s) not written within {timeout:g} s; abandoned")
        if unanalysed:
            self.problems.add("unanalysed", f"analysis of {unanalysed} window(s) not finished within {timeout:g} s")
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
            idle = self._busy == 0
            self._cond.notify_all()
        if idle and self._worker is not None:
            self._worker.close(wait=False)

    # ------------------------------------------------------------------ threads
    def _start_threads(self) -> None:
        if self._threads:
            return
        for name, loop in (("write", self._write_loop), ("analyse", self._analysis_loop)):
            thread = threading.Thread(target=loop, name=f"streamprof-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _take(self, queue: deque[_Job], tag: str) -> _Job | None:
        """The next job of ``queue``; None once closed with nothing left to do."""
        with self._cond:
            self._cond.wait_for(lambda: queue or (self._closed and self._busy == 0))
            if not queue:
                return None
            job = queue.popleft()
            self._in_flight.add(f"{job.local}.{tag}")
            return job

    def _done(self, job: _Job, tag: str, then: deque[_Job] | None = None) -> None:
        """``job`` left its thread: into ``then`` (the analysis queue, which keeps the latest
        :data:`MAX_PENDING_ANALYSES` windows), else finished. A job given up by :meth:`finish` is only dropped."""
        finished: _Job | None = job
        dropped: _Job | None = None
        with self._cond:
            self._in_flight.discard(f"{job.local}.{tag}")
            if job.local in self._abandoned:  # already counted out
                self._abandoned.discard(job.local)
                finished = None
                then = None
            elif then is not None:
                dropped = then.popleft() if len(then) >= MAX_PENDING_ANALYSES else None
                then.append(job)
                finished = dropped
            if finished is not None:
                self._busy -= 1
            idle = self._closed and self._busy == 0
            self._cond.notify_all()
        if dropped is not None:
            _remove(dropped.local)
            self.problems.add("analysis-behind", "analysis fell behind training; a window was not analysed")
        if then is None:
            _remove(job.local)
        if idle and self._worker is not None:
            self._worker.close(wait=False)

    def _write_loop(self) -> None:
        while (job := self._take(self._writes, "write")) is not None:
            written = False
            try:
                written = self._write(job)
            except BaseException as err:  # noqa: BLE001 - a thread must not die
                self.problems.add("write", f"could not write {job.identity.path}: {_reason(err)}")
            self._done(job, "write", self._analyses if written and self._worker is not None else None)

    def _write(self, job: _Job) -> bool:
        target = job.identity.path
        with open(job.local, "rb") as f:
            raw = f.read()
        try:
            call_with_deadline(
                lambda: write_atomic(target, igzip.compress(raw, compresslevel=self.compress_level, mtime=0)),
                self.timeout, f"the trace store ({target})",
            )
        except DeadlineExceeded as err:
            with self._cond:
                self._store_timeouts += 1
            self.problems.add("store-timeout", f"window {job.identity.window} not written: {err}")
            return False
        except Exception as err:  # noqa: BLE001
            self.problems.add("write", f"could not write {target}: {_reason(err)}")
            return False
        with self._cond:
            self._store_timeouts = 0
            self.written += 1
            self.results.append(WindowResult(job.identity.window or 0, job.steps[0], job.steps[1] - 1, target,
                                             len(raw), job.global_step))
        log.debug("streamprof: wrote %s (%d bytes)", target, len(raw))
        return True

    def _analysis_loop(self) -> None:
        while (job := self._take(self._analyses, "analyse")) is not None:
            try:
                self._analyse(job)
            except BaseException as err:  # noqa: BLE001 - a thread must not die
                self.problems.add("analysis", f"could not analyse window {job.identity.window}: {_reason(err)}")
            finally:
                self._done(job, "analyse")

    def _analyse(self, job: _Job) -> None:
        assert self._worker is not None
        try:
            analysis = self._worker.analyze(job.local, job.identity)
        except AnalysisError as err:
            self.problems.add("analysis", f"could not analyse window {job.identity.window}: {err}")
            return
        metrics = headline_metrics(analysis)
        for problem in analysis.warnings:
            self.problems.add("trace", problem)
        with self._cond:
            for i in range(len(self.results) - 1, -1, -1):
                res = self.results[i]
                if res.path == job.identity.path:
                    res = self.results[i] = replace(res, analysis=analysis, metrics=metrics)
                    self.ready.append(res)
                elif res.analysis is not None and i < len(self.results) - KEEP_ANALYSES:
                    self.results[i] = replace(res, analysis=None)


def _finish_at_exit(ref: weakref.ref) -> None:
    """At interpreter exit: pending exports get the exporter's timeout, then their temporary files go."""
    exporter = ref()
    if exporter is not None:
        exporter.close(exporter.timeout)


def _reason(err: BaseException) -> str:
    from lightning_streamprof.errors import describe

    return describe(err)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
