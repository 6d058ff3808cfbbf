"""One Kineto (``torch.profiler``) session per window: prepared during warm-up, started for the recorded steps,
stopped on the training thread and saved to a local file by Kineto's own writer off it (:class:`StoppedTrace`).

Kineto is one per process: a session claims it for the whole window (from its preparation until its trace is
saved), and is refused (:class:`SessionBusy`) while another StreamProfiler's session holds it or while a
``torch.profiler`` session of the program's own is active, which is then left untouched.

A session that records the device has Kineto detach CUPTI at its end (``TEARDOWN_CUPTI=1`` from CUDA 12.6,
:func:`release_cupti_after_windows`), so that the steps between windows run as fast as without a profiler; where
CUPTI must stay attached, :func:`cupti_teardown_note` says why. The recording options slow every recorded operator
and enlarge the trace: ``record_shapes`` copies input shapes and holds tensor references, ``profile_memory``
records every allocation and free, ``with_stack`` unwinds the Python stack at each operator (the costliest).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from typing import Any, Literal

import orjson
import torch

from lightning_streamprof.profiling.storage import remove_local

log = logging.getLogger(__name__)

Activity = Literal["cpu", "cuda"]


class ExportError(RuntimeError):
    """Kineto wrote no usable trace (it reports no error itself, e.g. when the temporary directory is full)."""


class SessionBusy(RuntimeError):
    """Another profiler session holds Kineto: the window records nothing (its message says whose session)."""


#: held by the session of this process that is prepared, recording or saving (Kineto's state is per process)
_KINETO = threading.Lock()


def _foreign_session() -> bool:
    """Whether a ``torch.profiler`` (or ``torch.autograd.profiler``) session not of ours is recording."""
    return bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


def _claim() -> None:
    """Claim Kineto for one session; :class:`SessionBusy` when another session holds it."""
    if not _KINETO.acquire(blocking=False):
        raise SessionBusy("another StreamProfiler is recording in this process (another Trainer, e.g. in another"
                          " thread)")
    if _foreign_session():
        _KINETO.release()
        raise SessionBusy("a torch.profiler session of the program's own is active; it is left as it is")


class Unrecorded:
    """Stands for the session of a window that records nothing because another session holds Kineto."""

    recording = False

    def release(self) -> None:
        """Nothing to end."""


class KinetoSession:
    """A ``torch.profiler.profile`` of one window, with the recording options of the profiler. It claims Kineto
    when made (:class:`SessionBusy` while another session holds it) until it is saved or released."""

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
        self.recording = False
        _claim()
        self._held = True
        try:
            quiet_kineto()
            kinds = kineto_activities(activities)
            release_cupti_after_windows(kinds)
            #: the session records a device's activity (its trace gets a counter track)
            self.records_device = any(kind != torch.profiler.ProfilerActivity.CPU for kind in kinds)
            self._prof = torch.profiler.profile(
                activities=kinds,
                record_shapes=record_shapes,
                profile_memory=profile_memory,
                with_stack=with_stack,
                with_flops=with_flops,
                experimental_config=_all_threads_config() if all_threads else None,
            )
            self._prof.prepare_trace()
        except BaseException:
            self._let_go()
            raise

    def start(self, metadata: dict[str, Any], rank: int, world_size: int) -> None:
        """Start recording; the trace gets ``distributedInfo`` (also without a process group) and ``metadata``
        under each of its keys. :class:`SessionBusy` (the session given up, Kineto untouched) when a session of
        the program's own started since this one was prepared."""
        if _foreign_session():
            self._let_go()
            raise SessionBusy("a torch.profiler session of the program's own started; it is left as it is")
        self._prof.start_trace()
        self.recording = True
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            info = {"backend": "none", "rank": rank, "world_size": world_size, "pg_count": 0}
            # json.dumps writes `"rank": 0` with a space, the form HTA's rank pattern reads (orjson writes none)
            self._prof.add_metadata_json("distributedInfo", json.dumps(info))
        self.add_metadata(metadata)

    def add_metadata(self, metadata: dict[str, Any]) -> None:
        """``metadata`` in the trace under each of its keys, while recording (a key given again keeps the last)."""
        for key, value in metadata.items():
            self._prof.add_metadata_json(key, orjson.dumps(value).decode())

    def stop(self) -> StoppedTrace:
        """Stop recording (on the training thread: Kineto stops where it started); the trace, not yet written, is
        returned to be saved elsewhere. The claim on Kineto passes to it."""
        try:
            self._prof.stop_trace()
        except BaseException:
            self.recording = False
            self._free_results()
            self._let_go()
            raise
        self.recording = False
        results = getattr(self._prof.profiler, "kineto_results", None)
        self._free_results()
        try:
            stopped = StoppedTrace(results)
        except BaseException:
            self._let_go()
            raise
        self._held = False  # the stopped trace lets Kineto go once saved or discarded
        return stopped

    def save(self) -> str:
        """Stop recording and write the trace to a local temporary file at once; returns its path (see
        :meth:`StoppedTrace.save`)."""
        stopped = self.stop()
        stopped.save()
        return stopped.local

    def release(self) -> None:
        """End the session without saving (a prepared session must start to stop); best effort."""
        if not getattr(self, "_held", False):
            return
        try:
            if not self.recording:
                self._prof.profiler._start_trace()
            self._prof.stop_trace()
        except Exception:  # noqa: BLE001 - best effort while recovering
            log.debug("streamprof: could not release the profiler session", exc_info=True)
        finally:
            self.recording = False
            self._free_results()
            self._let_go()

    def _free_results(self) -> None:
        """Drop Kineto's results of this session: its trace writer (and the file it holds open) goes with them."""
        with contextlib.suppress(AttributeError):
            self._prof.profiler.kineto_results = None

    def _let_go(self) -> None:
        """Give up the claim on Kineto (once)."""
        if getattr(self, "_held", False):
            self._held = False
            _KINETO.release()

    def __del__(self) -> None:
        """A session dropped without :meth:`save` or :meth:`release` does not keep Kineto claimed."""
        self._let_go()


class StoppedTrace:
    """A stopped window's Kineto results, until Kineto's writer has saved them to :attr:`local` (a temporary file
    made at once). Saving takes as long as stopping for a large trace (``with_stack``) and does not hold the GIL,
    so it runs on an export thread while training goes on; the claim on Kineto is held until it is saved or
    discarded, so that no other session starts beside the writer."""

    def __init__(self, results: Any) -> None:
        self._results = results
        self._lock = threading.Lock()
        fd, self.local = tempfile.mkstemp(prefix="streamprof-", suffix=".pt.trace.json")
        os.close(fd)

    @property
    def pending(self) -> bool:
        """Neither saved nor discarded yet."""
        return self._results is not None

    def save(self) -> None:
        """Write the trace to :attr:`local` (once); :class:`ExportError` when Kineto wrote nothing or a cut-off
        file (then the file is removed, Kineto's ``.tmp`` too)."""
        with self._lock:
            results, self._results = self._results, None
            if results is None:
                raise ExportError("the trace was discarded before it was saved")
            try:
                _write_results(results, self.local)
                _check_complete(self.local)
            except BaseException:
                del results  # Kineto's writer keeps "<name>.tmp" open until then: space stays taken
                remove_local(self.local, self.local + ".tmp")
                raise
            finally:
                _KINETO.release()

    def discard(self) -> None:
        """Drop the trace unsaved (its temporary file removed); nothing if it was saved."""
        with self._lock:
            if self._results is None:
                return
            self._results = None
            _KINETO.release()
        remove_local(self.local)

    def __del__(self) -> None:
        """A stopped trace dropped unsaved does not keep Kineto claimed."""
        if getattr(self, "_results", None) is not None:
            self._results = None
            _KINETO.release()
            remove_local(self.local)


def _write_results(results: Any, path: str) -> None:
    """Kineto's own writer: the Chrome trace JSON of ``results`` (``torch.profiler``'s ``export_chrome_trace``)."""
    results.save(path)


#: Kineto's log level above all of its messages (its levels go up to 5)
_KINETO_SILENT = "6"


def quiet_kineto() -> None:
    """Without a CUDA device, Kineto prints ``ERROR: ... gpuGetDeviceCount failed with code 35`` (it only means
    that there is no GPU) and a line at every window's start and stop: silence it, unless ``KINETO_LOG_LEVEL`` is
    set. With a GPU its messages are kept (a CUPTI error matters there). Kineto reads the variable when it starts."""
    if not torch.cuda.is_available():
        os.environ.setdefault("KINETO_LOG_LEVEL", _KINETO_SILENT)


#: CUDA runtime versions from which CUPTI can be torn down and set up again next to CUDA graphs
CUPTI_TEARDOWN_SAFE_FROM = (12, 6)


def cupti_teardown_note() -> str | None:
    """Why CUPTI stays attached to the process after a window (kernel launches then pay its callbacks for the rest
    of the run), or ``None`` when each window detaches it."""
    setting = os.environ.get("TEARDOWN_CUPTI")
    if setting == "1" or not torch.version.cuda:  # detached, or no CUPTI (ROCm's tracer is another)
        return None
    if setting is None and _cuda_version() >= CUPTI_TEARDOWN_SAFE_FROM:  # detached at the first device window
        return None
    if setting is not None:
        return (f"TEARDOWN_CUPTI={setting} keeps CUPTI attached after the first window: every kernel launch of the "
                "rest of the run pays its callbacks (a few percent of a launch-bound step)")
    return (f"CUDA {torch.version.cuda} cannot detach CUPTI safely where CUDA graphs run (before "
            f"{'.'.join(map(str, CUPTI_TEARDOWN_SAFE_FROM))}): CUPTI stays attached after the first window and "
            "every kernel launch of the rest of the run pays its callbacks; TEARDOWN_CUPTI=1 detaches it in a run "
            "without CUDA graphs")


def release_cupti_after_windows(kinds: Sequence[Any]) -> None:
    """Have Kineto detach CUPTI at the end of each window that recorded the device (``TEARDOWN_CUPTI=1``, read
    by Kineto as each trace stops). Kineto keeps it attached otherwise, and its callbacks then slow every kernel
    launch of the run that follows: 5% of each step of a launch-bound ViT linear probe on an H200 between windows.
    Left as it is when the environment sets it, and on CUDA before 12.6, where a teardown next to CUDA graphs
    crashes (torch's own rule)."""
    if ("TEARDOWN_CUPTI" in os.environ or not torch.version.cuda
            or not any(k == torch.profiler.ProfilerActivity.CUDA for k in kinds)):
        return
    if _cuda_version() >= CUPTI_TEARDOWN_SAFE_FROM:
        os.environ["TEARDOWN_CUPTI"] = "1"


def _cuda_version() -> tuple[int, ...]:
    """The CUDA runtime torch was built with, ``(major, minor)``."""
    return tuple(int(part) for part in torch.version.cuda.split(".")[:2])


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
