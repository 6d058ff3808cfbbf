"""Each window's Kineto session as the profiler's options and the Trainer's callbacks ask for it: which threads it
records, and what is said once about it (the memory view on one thread, CUPTI left attached)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_streamprof.profiling.session import KinetoSession, cupti_teardown_note

#: said once when the memory view makes a window record the training thread although batches are staged on another
MEMORY_THREADS_NOTE = (
    "StreamProfiler: profile_memory=True with batches staged on a thread: windows record the training thread (and"
    " autograd's), not the staging thread, because torch drops every memory event of a session that records all"
    " threads; the staged batches' memory still counts in every event's totals.")


@runtime_checkable
class StagingCallback(Protocol):
    """A callback that may stage batches on a thread of its own (the profiler then records every thread) and
    reports what it did in the profiler's summary (:class:`~lightning_streamprof.StreamPipeline` is one)."""

    stages_on_thread: bool

    def report(self) -> str: ...


def staging_callbacks(trainer: Any) -> list[StagingCallback]:
    """The Trainer's callbacks that stage batches (none without a Trainer)."""
    return [cb for cb in getattr(trainer, "callbacks", None) or [] if isinstance(cb, StagingCallback)]


class SessionMaker:
    """Makes each window's :class:`~.session.KinetoSession` with the recording options. ``all_threads=None``
    records every thread when a callback stages batches on its own, but only the training thread's (and autograd's)
    with ``profile_memory``: torch drops every memory event of a session of all threads (pytorch/pytorch#166121)."""

    def __init__(self, activities: Sequence[str] | None, recording: dict[str, bool], all_threads: bool | None) -> None:
        self.activities, self.recording, self.all_threads = activities, recording, all_threads
        self.said_memory_threads = False
        self.cupti_note: str | None = None  # what keeps CUPTI attached, found at the first window on the device

    def __call__(self, callbacks: Sequence[StagingCallback]) -> KinetoSession:
        all_threads = self.all_threads
        if all_threads is None:
            all_threads = any(cb.stages_on_thread for cb in callbacks)
            if all_threads and self.recording["profile_memory"]:
                all_threads = False
                if not self.said_memory_threads:
                    self.said_memory_threads = True
                    rank_zero_info(MEMORY_THREADS_NOTE)
        session = KinetoSession(self.activities, all_threads=all_threads, **self.recording)  # type: ignore[arg-type]
        if session.records_device and self.cupti_note is None:
            self.cupti_note = cupti_teardown_note() or ""
            if self.cupti_note:
                rank_zero_warn(f"StreamProfiler: {self.cupti_note}.")
        return session

    def notes(self) -> list[str]:
        """What the report says of the sessions: the memory view's thread, CUPTI left attached."""
        notes = [MEMORY_THREADS_NOTE.removeprefix("StreamProfiler: ")] if self.said_memory_threads else []
        if self.cupti_note:
            notes.append(self.cupti_note[0].upper() + self.cupti_note[1:] + ".")
        return notes
