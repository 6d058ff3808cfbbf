"""Analysis of finished windows in a worker process, so that no trace parsing competes with training.

The worker is a plain ``python -m lightning_streamprof.window_analysis`` child (no multiprocessing, so the
user's training script is never re-imported). It reads one trace path per line on stdin and answers one
JSON line on stdout: ``{"ok": <analysis JSON>}`` or ``{"error": "<file>: <reason>"}``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import orjson


class AnalysisError(RuntimeError):
    """The worker could not analyse a trace (the message names the file)."""


def analyze_file(path: str) -> dict[str, Any]:
    from lightning_streamprof.analysis import analyze_table
    from lightning_streamprof.trace import read_trace

    return analyze_table(read_trace(path)).to_json()


class AnalysisWorker:
    """A lazily started, low-priority child process that analyses one trace at a time."""

    def __init__(self, timeout: float = 600.0) -> None:
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        return subprocess.Popen(
            [sys.executable, "-m", "lightning_streamprof.window_analysis"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )

    def analyze(self, path: str) -> dict[str, Any]:
        """Analyse ``path`` in the worker; blocks the calling (background) thread until done."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(path.encode() + b"\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except (BrokenPipeError, OSError) as err:
                raise AnalysisError(f"{path}: analysis worker failed ({err})") from None
        if not line:
            raise AnalysisError(f"{path}: analysis worker exited (code {proc.poll()})")
        answer = orjson.loads(line)
        if "error" in answer:
            raise AnalysisError(answer["error"])
        return answer["ok"]

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            proc.kill()


def _serve() -> None:
    try:
        os.nice(10)
    except OSError:
        pass
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        path = raw.decode().rstrip("\n")
        if not path:
            continue
        try:
            answer = {"ok": analyze_file(path)}
        except Exception as err:  # noqa: BLE001 - reported to the parent, which warns
            message = str(err)
            answer = {"error": message if message.startswith(path) else f"{path}: {message or type(err).__name__}"}
        out.write(orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve()
