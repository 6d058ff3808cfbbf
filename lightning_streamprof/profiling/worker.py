"""Analysis of finished windows in a worker process, so that no trace parsing competes with training.

The worker is a plain ``python -m lightning_streamprof.profiling.worker`` child (no multiprocessing, so the
user's training script is never re-imported). It reads one request per line on stdin, the JSON of the trace's
:class:`~lightning_streamprof.results.TraceIdentity` with ``path`` set to the local file to read, and answers one
JSON line on stdout: ``{"ok": <result JSON>}`` or ``{"error": "<file>: <reason>"}``. The result carries the
trace's final identity (its target path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import msgspec

from lightning_streamprof.deadline import DeadlineExceeded, call_with_deadline
from lightning_streamprof.results import Result, TraceIdentity, from_json, to_json


class AnalysisError(RuntimeError):
    """The worker could not analyse a trace (the message names the file)."""


def analyze_local(local_path: str, identity: TraceIdentity) -> Result:
    """The result of the trace saved at ``local_path``, identified as ``identity``."""
    from lightning_streamprof.analysis import analyze_table
    from lightning_streamprof.trace import read_trace

    return analyze_table(read_trace(local_path), identity)


class _Answer(msgspec.Struct):
    ok: Result | None = None
    error: str | None = None


class AnalysisWorker:
    """A lazily started, low-priority child process that analyses one trace at a time.

    Each analysis gets ``timeout`` seconds; a worker that takes longer, dies or answers nonsense is stopped
    (the next analysis starts a new one) and the trace is reported as not analysed.
    """

    #: the child's command line
    argv: tuple[str, ...] = (sys.executable, "-m", "lightning_streamprof.profiling.worker")

    def __init__(self, timeout: float = 300.0) -> None:
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        return subprocess.Popen(list(self.argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env)

    def analyze(self, path: str, identity: TraceIdentity) -> Result:
        """Analyse the local trace ``path`` in the worker; blocks the calling (background) thread until done."""
        with self._lock:
            try:
                if self._proc is None or self._proc.poll() is not None:
                    self._proc = self._start()
                proc = self._proc
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(to_json(msgspec.structs.replace(identity, path=path)) + b"\n")
                proc.stdin.flush()
                line = call_with_deadline(proc.stdout.readline, self.timeout, "the analysis worker")
            except DeadlineExceeded as err:
                self._stop_locked()
                raise AnalysisError(f"{path}: {err}") from None
            except OSError as err:
                self._stop_locked()
                raise AnalysisError(f"{path}: analysis worker failed ({err})") from None
            if not line:
                code = proc.poll()
                self._stop_locked()
                raise AnalysisError(f"{path}: analysis worker exited (code {code})")
        try:
            answer = from_json(line, _Answer)
        except msgspec.DecodeError as err:
            raise AnalysisError(f"{path}: the analysis worker's answer is not a result ({err})") from None
        if answer.ok is None:
            raise AnalysisError(answer.error or f"{path}: no result")
        warnings = [w.replace(path, identity.path, 1) for w in answer.ok.warnings]
        return msgspec.structs.replace(answer.ok, traces=[identity], run=identity.run, warnings=warnings)

    def _stop_locked(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()

    def close(self, wait: bool = True) -> None:
        """Stop the worker: end of input, then (with ``wait``) up to 10 s for it to exit before it is killed.
        Never waits for an analysis in progress (its reader then sees the end of the output)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            if wait:
                proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            proc.kill()
        if not wait:
            threading.Thread(target=_reap, args=(proc,), daemon=True).start()


def _reap(proc: subprocess.Popen) -> None:
    """Collect the exit status of a worker left to finish on its own (no zombie), killing it after 10 s."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _serve() -> None:
    try:
        os.nice(10)
    except OSError:
        pass
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        path = "<request>"
        try:
            identity = from_json(raw, TraceIdentity)
            path = identity.path
            answer = _Answer(ok=analyze_local(path, identity))
        except Exception as err:  # noqa: BLE001 - reported to the parent, which warns
            message = str(err)
            answer = _Answer(error=message if message.startswith(path) else f"{path}: {message or type(err).__name__}")
        out.write(to_json(answer) + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve()
