"""Analysis and post-processing of finished windows in a worker process, so that neither trace parsing nor the
counter track and gzip of a trace compete with training.

The worker is a plain ``python -m lightning_streamprof.profiling.worker`` child (no multiprocessing, so the
user's training script is never re-imported), at a low CPU priority (nice 10), with one thread for numpy and
BLAS. It reads one request per line on stdin, the JSON of a :class:`_Request`: the trace's
:class:`~lightning_streamprof.results.TraceIdentity` with ``path`` set to the local file to read, and a gzip level
when the worker is to return the trace ready to write. It answers one JSON line on stdout, ``{"ok": <result JSON>}``
or ``{"error": "<file>: <reason>"}``, with ``"gz": <n>`` and ``"raw": <size>`` when it also compressed the trace
(with the counter track of its analysis, when there is one); then ``n`` bytes of the gzipped trace follow. The
result carries the trace's final identity (its target path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import time
from typing import NamedTuple

import msgspec

from lightning_streamprof.deadline import DeadlineExceeded, call_with_deadline
from lightning_streamprof.results import Result, TraceIdentity, from_json, to_json

#: the worker's CPU priority: below the training process and its DataLoader workers (a tenth of their CPU share
#: where it competes with them), yet not starved on a busy machine, so that its windows' exports end soon
NICE = 10
#: thread pools of the numerical libraries the analysis may load, held to one thread each
_ONE_THREAD = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "RAYON_NUM_THREADS")


class AnalysisError(RuntimeError):
    """The worker could not analyse a trace (the message names the file)."""


def analyze_local(local_path: str, identity: TraceIdentity) -> Result:
    """The result of the trace saved at ``local_path``, identified as ``identity``."""
    from lightning_streamprof.analysis import analyze_table
    from lightning_streamprof.trace import read_trace

    return analyze_table(read_trace(local_path), identity)


class _Request(msgspec.Struct):
    identity: TraceIdentity
    gzip_level: int | None = None  # also return the trace gzipped at this level (with its counter track)


class _Answer(msgspec.Struct):
    ok: Result | None = None
    error: str | None = None
    gz: int | None = None  # bytes of the gzipped trace that follow the line
    raw: int | None = None  # the trace's size before compression


class Processed(NamedTuple):
    """A window as the worker left it: its analysis, or why there is none, and the gzipped trace when asked for."""

    analysis: Result | None
    error: str | None
    gz: bytes | None
    raw_size: int


class AnalysisWorker:
    """A low-priority child process that analyses (and compresses) one trace at a time; :meth:`start` starts it
    ahead of the first window, else the first request does.

    Each request gets ``timeout`` seconds; a worker that takes longer, dies or answers nonsense is stopped
    (the next request starts a new one) and the trace is reported as not analysed.
    """

    #: the child's command line
    argv: tuple[str, ...] = (sys.executable, "-m", "lightning_streamprof.profiling.worker")

    def __init__(self, timeout: float = 300.0) -> None:
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._ending: set[threading.Thread] = set()  # workers being stopped in the background

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, **dict.fromkeys(_ONE_THREAD, "1")}
        return subprocess.Popen(list(self.argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env)

    def start(self) -> None:
        """Start the worker now (at the stage's setup, while no step runs), so that no window waits for it."""
        with self._lock:
            self._running_locked()

    def _running_locked(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is not None:  # exited between requests
            self._stop_locked()
        if self._proc is None:
            self._proc = self._start()
        return self._proc

    def analyze(self, path: str, identity: TraceIdentity, gzip_level: int | None = None) -> Processed:
        """Analyse the local trace ``path`` in the worker (and, with ``gzip_level``, have it gzip the trace with
        its counter track); blocks the calling (background) thread until done. :class:`AnalysisError` when the
        worker fails; an analysis that fails is ``Processed.error``."""
        with self._lock:
            deadline = time.monotonic() + self.timeout
            try:
                proc = self._running_locked()
                assert proc.stdin is not None and proc.stdout is not None
                request = _Request(msgspec.structs.replace(identity, path=path), gzip_level)
                proc.stdin.write(to_json(request) + b"\n")
                proc.stdin.flush()
                line = call_with_deadline(proc.stdout.readline, self.timeout, "the analysis worker")
                if not line:
                    code = proc.poll()
                    self._stop_locked()
                    raise AnalysisError(f"{path}: analysis worker exited (code {code})")
                try:
                    answer = from_json(line, _Answer)
                except msgspec.DecodeError as err:
                    self._stop_locked()
                    raise AnalysisError(f"{path}: the analysis worker's answer is not a result ({err})") from None
                gz = None
                if answer.gz is not None:
                    stdout = proc.stdout
                    gz = call_with_deadline(lambda: stdout.read(answer.gz), max(0.0, deadline - time.monotonic()),
                                            "the analysis worker")
                    if len(gz) != answer.gz:
                        self._stop_locked()
                        raise AnalysisError(f"{path}: analysis worker exited (code {proc.poll()})")
            except DeadlineExceeded as err:
                self._stop_locked()
                raise AnalysisError(f"{path}: {err}") from None
            except (OSError, ValueError) as err:  # ValueError: its pipes were closed by close() meanwhile
                self._stop_locked()
                raise AnalysisError(f"{path}: analysis worker failed ({err})") from None
        raw_size = answer.raw or 0
        if answer.ok is None:
            return Processed(None, answer.error or f"{path}: no result", gz, raw_size)
        warnings = [w.replace(path, identity.path, 1) for w in answer.ok.warnings]
        result = msgspec.structs.replace(answer.ok, traces=[identity], run=identity.run, warnings=warnings)
        return Processed(result, None, gz, raw_size)

    def _stop_locked(self) -> None:
        """Kill the worker (it failed, or took too long); its exit is collected and its pipes closed in the
        background."""
        proc, self._proc = self._proc, None
        if proc is not None:
            self._end(proc, grace=0.0)

    def close(self, wait: bool = True) -> None:
        """Stop the worker: end of input, then up to 10 s for it to exit before it is killed; its pipes are closed
        once it has exited. With ``wait``, waits for that (and for workers stopped before, 15 s in all), else it
        happens in the background. Never waits for an analysis in progress (its reader then sees the end of the
        output)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            self._end(proc, grace=10.0)
        if wait:
            deadline = time.monotonic() + 15.0
            for thread in list(self._ending):
                thread.join(max(0.0, deadline - time.monotonic()))

    def _end(self, proc: subprocess.Popen, grace: float) -> None:
        """Have :func:`_end_process` stop ``proc`` on a daemon thread (listed in ``_ending`` until it is done); where
        no thread can start (at interpreter exit), it is killed here."""
        def run() -> None:
            try:
                _end_process(proc, grace)
            finally:
                self._ending.discard(thread)

        thread = threading.Thread(target=run, name="streamprof-worker-exit", daemon=True)
        self._ending.add(thread)
        try:
            thread.start()
        except RuntimeError:
            self._ending.discard(thread)
            _end_process(proc, 0.0)


def _end_process(proc: subprocess.Popen, grace: float) -> None:
    """Stop ``proc``: end of input and up to ``grace`` seconds to exit, else (or with no grace) it is killed; then
    its exit status is collected (no zombie) and its pipes closed (a reader still in one has seen the end by then)."""
    try:
        if grace > 0:
            _close_input(proc)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    finally:
        _close_input(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def _close_input(proc: subprocess.Popen) -> None:
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:  # a request it never read: the pipe is closed all the same
            pass


def _low_priority() -> None:
    """The worker gives way to the training process (nice 10)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    except (OSError, AttributeError):
        try:
            os.nice(NICE)
        except OSError:
            pass


def _answer(line: bytes) -> tuple[_Answer, bytes | None]:
    """The answer to one request line, and the gzipped trace when it asked for one."""
    try:
        request = from_json(line, _Request)
    except Exception as err:  # noqa: BLE001 - reported to the parent, which warns
        return _Answer(error=f"<request>: {err}"), None
    path = request.identity.path
    try:
        answer = _Answer(ok=analyze_local(path, request.identity))
    except Exception as err:  # noqa: BLE001 - reported to the parent, which warns
        message = str(err)
        answer = _Answer(error=message if message.startswith(path) else f"{path}: {message or type(err).__name__}")
    if request.gzip_level is None:
        return answer, None
    from lightning_streamprof.profiling.postprocess import gzipped_trace

    try:
        with open(path, "rb") as f:
            raw = f.read()
        gz = gzipped_trace(raw, request.gzip_level, answer.ok)
    except Exception:  # noqa: BLE001 - the parent then compresses the trace itself
        return answer, None
    answer.gz, answer.raw = len(gz), len(raw)
    return answer, gz


def _serve() -> None:
    _low_priority()
    import lightning_streamprof.analysis  # noqa: F401 - imported before the first window, not in its wait
    import lightning_streamprof.profiling.postprocess  # noqa: F401
    import lightning_streamprof.trace  # noqa: F401

    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        answer, gz = _answer(line)
        out.write(to_json(answer) + b"\n")
        if gz is not None:
            out.write(gz)
        out.flush()


if __name__ == "__main__":
    _serve()
