"""One Kineto (``torch.profiler``) session per window: prepared during warm-up, started for the recorded steps,
stopped and saved to a local file by Kineto's own writer."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from typing import Any, Literal

import orjson
import torch

log = logging.getLogger(__name__)

Activity = Literal["cpu", "cuda"]


class ExportError(RuntimeError):
    """Kineto wrote no usable trace (it reports no error itself, e.g. when the temporary directory is full)."""


class KinetoSession:
    """A ``torch.profiler.profile`` of one window, with the recording options of the profiler."""

    def __init__(
        self,
        activities: Sequence[Activity] | None,
        *,
        record_shapes: bool,
        profile_memory: bool,
        with_stack: bool,
        with_flops: bool,
        all_threads: bool,
    ) -> None:
        quiet_kineto()
        self._prof = torch.profiler.profile(
            activities=kineto_activities(activities),
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_flops=with_flops,
            experimental_config=_all_threads_config() if all_threads else None,
        )
        self._prof.prepare_trace()
        self.recording = False

    def start(self, metadata: dict[str, Any], rank: int, world_size: int) -> None:
        """Start recording; the trace gets ``distributedInfo`` (also without a process group) and ``metadata``
        under each of its keys."""
        self._prof.start_trace()
        self.recording = True
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            info = {"backend": "none", "rank": rank, "world_size": world_size, "pg_count": 0}
            # json.dumps writes `"rank": 0` with a space, the form HTA's rank pattern reads (orjson writes none)
            self._prof.add_metadata_json("distributedInfo", json.dumps(info))
        for key, value in metadata.items():
            self._prof.add_metadata_json(key, orjson.dumps(value).decode())

    def save(self) -> str:
        """Stop recording and write the trace to a local temporary file; returns its path. :class:`ExportError`
        when Kineto wrote nothing or a cut-off file (the file is removed)."""
        self._prof.stop_trace()
        self.recording = False
        fd, local = tempfile.mkstemp(prefix="streamprof-", suffix=".pt.trace.json")
        os.close(fd)
        try:
            self._prof.export_chrome_trace(local)
            _check_complete(local)
        except BaseException:
            for path in (local, local + ".tmp"):  # Kineto writes through "<name>.tmp"
                with contextlib.suppress(OSError):
                    os.remove(path)
            raise
        return local

    def release(self) -> None:
        """End the session without saving (a prepared session must start to stop); best effort."""
        try:
            if not self.recording:
                self._prof.profiler._start_trace()
            self._prof.stop_trace()
        except Exception:  # noqa: BLE001 - best effort while recovering
            log.debug("streamprof: could not release the profiler session", exc_info=True)
        self.recording = False


#: Kineto's log level above all of its messages (its levels go up to 5)
_KINETO_SILENT = "6"


def quiet_kineto() -> None:
    """Without a CUDA device, Kineto prints ``ERROR: ... gpuGetDeviceCount failed with code 35`` (it only means
    that there is no GPU) and a line at every window's start and stop: silence it, unless ``KINETO_LOG_LEVEL`` is
    set. With a GPU its messages are kept (a CUPTI error matters there). Kineto reads the variable when it starts."""
    if not torch.cuda.is_available():
        os.environ.setdefault("KINETO_LOG_LEVEL", _KINETO_SILENT)


def _check_complete(path: str) -> None:
    """:class:`ExportError` unless ``path`` holds a whole JSON document (it ends with ``}``)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(max(0, size - 256))
        tail = f.read().rstrip()
    if not tail.endswith(b"}"):
        what = "an empty trace" if size == 0 else f"a cut-off trace ({size} bytes)"
        raise ExportError(f"Kineto wrote {what} to {os.path.dirname(path)} (is the temporary directory full?)")


def kineto_activities(names: Sequence[Activity] | None) -> list[Any]:
    """``torch.profiler.ProfilerActivity`` values; default CPU, plus CUDA when available."""
    from torch.profiler import ProfilerActivity

    names = list(names) if names else (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    table = {"cpu": ProfilerActivity.CPU, "cuda": ProfilerActivity.CUDA}
    unknown = sorted(set(names) - set(table))
    if unknown:
        raise ValueError(f"StreamProfiler: unknown activities {unknown}; use 'cpu' and/or 'cuda'")
    return [table[n] for n in names]


def _all_threads_config() -> Any:
    try:
        return torch.profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError):  # a torch without it
        return None
