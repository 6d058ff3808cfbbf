"""Background export of finished windows: gzip (isal), write through a temporary name, analyse."""

from __future__ import annotations

import logging
import os
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from isal import igzip

from lightning_streamprof.profiling.counters import add_counters, utilization_counters
from lightning_streamprof.profiling.storage import ensure_dir, write_atomic
from lightning_streamprof.profiling.worker import AnalysisError, AnalysisWorker
from lightning_streamprof.results import Result, TraceIdentity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowResult:
    """One exported window: which steps it recorded and where its trace is."""

    window: int
    first_step: int
    last_step: int
    path: str
    size_bytes: int
    global_step: int = 0
    analysis: Result | None = None


class TraceExporter:
    """A single worker thread that turns locally saved Kineto traces into gzipped files at their target.

    It only compresses and writes (isal and file I/O release the GIL); the analysis runs in a worker
    process (:mod:`lightning_streamprof.profiling.worker`), so the training thread keeps running. The analysis
    comes first, so that the written trace carries the GPU utilization as a counter track. Analysed
    windows are also appended to ``ready`` for the training thread to log. Every failure is a warning:
    the training run never sees an exception from here.
    """

    def __init__(self, compress_level: int = 2, analyze: bool = True) -> None:
        self.compress_level = compress_level
        self.results: list[WindowResult] = []
        self.ready: list[WindowResult] = []
        self._worker = AnalysisWorker() if analyze else None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamprof-export")
        self._pending: list[Future] = []

    def check_writable(self, directory: str) -> bool:
        try:
            ensure_dir(directory)
            return True
        except Exception as err:  # noqa: BLE001
            warnings.warn(f"StreamProfiler: cannot write traces to {directory}: {err}", stacklevel=3)
            return False

    def submit(self, local_path: str, identity: TraceIdentity, *, steps: tuple[int, int], global_step: int = 0) -> None:
        """Export the trace saved at ``local_path`` to ``identity.path`` (the window's recorded ``steps``:
        first, past-the-end)."""
        self._pending.append(self._pool.submit(self._export, local_path, identity, steps, global_step))

    def wait(self) -> None:
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self) -> None:
        self.wait()
        if self._worker is not None:
            self._worker.close()

    def _export(self, local_path: str, identity: TraceIdentity, steps: tuple[int, int], global_step: int) -> None:
        target, window = identity.path, identity.window or 0
        try:
            with open(local_path, "rb") as f:
                raw = f.read()
        except OSError as err:
            warnings.warn(f"StreamProfiler: could not read the trace of window {window}: {err}", stacklevel=2)
            _remove(local_path)
            return
        analysis = None
        if self._worker is not None:
            try:
                analysis = self._worker.analyze(local_path, identity)
            except AnalysisError as err:
                warnings.warn(f"StreamProfiler: could not analyse window {window}: {err}", stacklevel=2)
        _remove(local_path)
        size = len(raw)
        if analysis is not None:
            raw = add_counters(raw, utilization_counters(analysis))
        try:
            write_atomic(target, igzip.compress(raw, compresslevel=self.compress_level, mtime=0))
        except Exception as err:  # noqa: BLE001
            warnings.warn(f"StreamProfiler: could not write {target}: {err}", stacklevel=2)
            return
        result = WindowResult(window, steps[0], steps[1] - 1, target, size, global_step, analysis)
        self.results.append(result)
        if analysis is not None:
            self.ready.append(result)
        log.debug("streamprof: wrote %s (%d bytes)", target, size)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
