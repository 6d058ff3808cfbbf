"""Windows on demand: a running job is asked for a window by a marker file or a signal, without a restart.

On global rank 0 a daemon thread looks for the marker :data:`~lightning_streamprof.names.REQUEST_FILE` in the
profiler's ``dirpath`` and in the run's directory (local or any fsspec store) at most every ``poll_seconds`` and every
:data:`POLL_STEPS` steps, whichever is rarer, and removes the one it finds (``streamprof record RUN_DIR`` writes it).
A signal (``SIGUSR2`` by default; SLURM uses ``SIGUSR1`` for requeue) is handled on the main thread only, where the
program has no handler of its own for it, and the default action comes back at the end of the stage. Either leaves a request that the training thread
takes at its next step boundary (:attr:`Requests.pending`: one attribute read per step). In a multi-rank run the
ranks agree on rank 0's request at every :data:`POLL_STEPS`-th step (:meth:`Requests.agree`), so that all of them
record the same steps.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from lightning_streamprof.names import REQUEST_FILE
from lightning_streamprof.profiling.storage import filesystem, join_path
from lightning_streamprof.results.triggers import REQUEST, WindowTrigger

log = logging.getLogger(__name__)

#: the least steps, and the default least seconds, between two looks for the marker
POLL_STEPS = 100
POLL_SECONDS = 5.0
#: the signal that asks for a window by default
SIGNAL = "SIGUSR2"
#: the longest the end of a stage waits for the poll thread
JOIN_SECONDS = 2.0


def signal_number(value: str | int | None) -> int | None:
    """A signal's number from its name (``"SIGUSR2"``, ``"USR2"``) or number; None for no signal; ValueError for a
    name this platform has not."""
    if value is None:
        return None
    if isinstance(value, int):
        return int(signal.Signals(value))
    name = value.upper() if value.upper().startswith("SIG") else f"SIG{value.upper()}"
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(value) from None


class Requests:
    """The requests for a window of one stage's run: ``paths`` are the markers looked for (on rank 0), ``signum``
    the signal handled (None: none), ``steps()`` the steps the run has made (the poll waits for
    :data:`POLL_STEPS` of them)."""

    def __init__(self, paths: Sequence[str], signum: int | None, steps: Callable[[], int], *,
                 poll_seconds: float = POLL_SECONDS, poll_steps: int = POLL_STEPS) -> None:
        self.paths = list(paths)
        self.poll_seconds, self.poll_steps = poll_seconds, poll_steps
        self._steps = steps
        #: how the latest request came (``"marker"``, ``"signal"``), until the training thread takes it
        self.pending: str | None = None
        self.note: str | None = None  # why the signal is not handled, when it is not
        self._offered: WindowTrigger | None = None
        self._signum, self._previous = signum, None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if signum is not None:
            self._install(signum)
        if self.paths:
            self._thread = threading.Thread(target=self._poll_loop, name="streamprof-requests", daemon=True)
            self._thread.start()

    def _install(self, signum: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.note = (f"{signal.Signals(signum).name} does not ask for a window: the profiler was set up off the "
                         "main thread, where Python cannot handle signals; the marker file still does")
            self._signum = None
            return
        name = signal.Signals(signum).name
        if callable(signal.getsignal(signum)):
            self.note = (f"{name} does not ask for a window: the program handles it already, and its handler is left "
                         "alone; the marker file still does")
            self._signum = None
            return
        try:
            self._previous = signal.signal(signum, self._on_signal)
        except (ValueError, OSError) as err:
            self.note = f"{name} does not ask for a window: {err}"
            self._signum = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.pending = "signal"

    def _poll_loop(self) -> None:
        last = self._steps()
        while not self._stop.wait(self.poll_seconds):
            now = self._steps()
            if now - last < self.poll_steps:
                continue
            last = now
            if self.pending is None and self.look():
                self.pending = "marker"

    def look(self) -> bool:
        """Whether a marker is there (the one found is removed; a store that fails is a debug line, not a stop)."""
        for path in self.paths:
            try:
                fs, local = filesystem(path)
                if fs.exists(local):
                    with contextlib.suppress(Exception):
                        fs.rm(local)
                    return True
            except Exception as err:  # noqa: BLE001 - a store that cannot be read asks for nothing
                log.debug("streamprof: could not look for %s: %s", path, err)
        return False

    def offer(self, trigger: WindowTrigger) -> bool:
        """A window wanted for another reason (the step-time watch of a multi-rank run), for the ranks to agree on."""
        self._offered = trigger
        return True

    def take(self, step: int) -> WindowTrigger | None:
        """The window offered, else the pending request as a trigger seen at global step ``step`` (it stays until
        :meth:`done`)."""
        if self._offered is not None:
            return self._offered
        via = self.pending
        return WindowTrigger(reason=REQUEST, via=via, step=step) if via is not None else None

    def done(self) -> None:
        """The window taken got its window."""
        if self._offered is not None:
            self._offered = None
        else:
            self.pending = None

    def close(self) -> None:
        """Stop looking (the poll thread is waited for, at most :data:`JOIN_SECONDS`: a look at a store that hangs
        does not hold the run, the daemon thread ends with it); the signal's earlier handler comes back (once)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(JOIN_SECONDS)
        if self._signum is not None and self._previous is not None:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(self._signum, self._previous)
            self._signum = None


def marker_paths(base: str, run_dir: str) -> list[str]:
    """Where ``streamprof record`` may put the marker: the profiler's ``dirpath`` and the run's directory."""
    return [join_path(base, REQUEST_FILE), join_path(run_dir, REQUEST_FILE)]


def write_marker(directory: str) -> str:
    """Write the marker in ``directory`` (a local path or fsspec URL, which must exist: a mistyped one would ask no
    job); its path."""
    from lightning_streamprof.output import write_atomic

    fs, local = filesystem(directory)
    if not fs.isdir(local):
        raise FileNotFoundError(f"no such directory: {directory}")
    path = join_path(directory, REQUEST_FILE)
    write_atomic(path, f"{time.time():.3f}\n".encode())
    return path


def attach_requests(settings: Any, base: str, run_dir: str, rank: int, world_size: int, fit: bool,
                    steps: Callable[[], int], shared: bool) -> tuple[Requests | None, str | None]:
    """The requests of a fit on global rank 0, or None and the line that says why there are none (None when they are
    turned off, and on the other ranks). A multi-rank run needs the ranks' exchange (``shared``)."""
    if settings.request_poll is None or not fit or rank != 0:
        return None, None
    if world_size > 1 and not shared:
        return None, ("windows on request are off in this multi-rank run: the ranks agree on them through the live "
                      "exchange, which needs analyze=True")
    requests = Requests(marker_paths(base, run_dir), settings.request_signal, steps,
                        poll_seconds=settings.request_poll)
    return requests, requests.note
