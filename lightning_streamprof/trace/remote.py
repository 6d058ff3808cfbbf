"""Reading local paths and fsspec URLs: bounded waits and one-line reasons.

A remote store gets :func:`~lightning_streamprof.deadline.io_timeout` seconds per request (30 s, or
``$STREAMPROF_IO_TIMEOUT``) and few retries, so an unreachable endpoint fails in seconds. Every problem becomes
a :class:`~lightning_streamprof.trace.TraceFormatError` naming the path and the real reason: a missing extra,
no credentials, connection refused, a time-out, no such file.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import fsspec
from fsspec.core import split_protocol

from lightning_streamprof.errors import describe
from lightning_streamprof.deadline import DeadlineExceeded, call_with_deadline, io_timeout
from lightning_streamprof.locations import filesystem as _filesystem
from lightning_streamprof.locations import is_local, is_url
from lightning_streamprof.output import kind_of
from lightning_streamprof.trace.table import TraceFormatError

T = TypeVar("T")

#: protocol -> (package, extra of this project that installs it)
EXTRAS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gs"), "gcs": ("gcsfs", "gs"),
          "abfs": ("adlfs", "blob"), "abfss": ("adlfs", "blob"), "az": ("adlfs", "blob")}
#: options that bound each request, used where the user's fsspec configuration sets none
_BOUNDED = {
    "s3": {"config_kwargs": {"connect_timeout": 5, "read_timeout": 30, "retries": {"max_attempts": 2}}},
}


def protocol(path: str) -> str:
    """The protocol of ``path`` (``file`` for a local path, whatever ``::`` it holds)."""
    return (split_protocol(str(path))[0] if is_url(path) else None) or "file"


class LastFailure:
    """The last failed request of an aiohttp-based filesystem (gcsfs), which retries a refused connection with
    back-off for about 30 s: when the I/O time-out speaks first, the reason is still the real one."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def session_kwargs(self) -> dict[str, Any]:
        """aiohttp session options that record each failed request here."""
        import aiohttp

        async def failed(session: Any, context: Any, params: Any) -> None:
            self.error = params.exception

        config = aiohttp.TraceConfig()
        config.on_request_exception.append(failed)
        return {"trace_configs": [config]}


def _options(proto: str) -> tuple[dict[str, Any], LastFailure | None]:
    """Options that bound requests where the user's fsspec configuration sets none, and where failed requests
    are recorded (``None``: not for this protocol)."""
    proto = "s3" if proto == "s3a" else "gs" if proto == "gcs" else proto
    theirs = fsspec.config.conf.get(proto, {})
    ours = dict(_BOUNDED.get(proto, {}))
    failure = None
    if proto == "gs" and "session_kwargs" not in theirs:
        failure = LastFailure()
        ours["session_kwargs"] = failure.session_kwargs()
    return {k: v for k, v in ours.items() if k not in theirs}, failure


def filesystem(path: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``path`` and the path as it names it; :class:`TraceFormatError` when the
    protocol is unknown or its package is not installed."""
    proto = protocol(path)
    try:
        options, failure = _options(proto)
        fs, local = _filesystem(str(path), **options)
        if failure is not None:
            fs._streamprof_last_failure = failure
        return fs, local
    except ImportError:
        package, extra = EXTRAS.get(proto, (f"the package for {proto}://", None))
        hint = f": pip install 'lightning-streamprof[{extra}]'" if extra else ""
        raise TraceFormatError(str(path), f"reading {proto}:// needs {package}{hint}") from None
    except Exception as err:  # noqa: BLE001 - e.g. gcsfs looks for credentials when it is created
        if isinstance(err, ValueError) and "not known" in str(err).lower():
            raise TraceFormatError(str(path), f"unknown protocol {proto}://") from None
        raise TraceFormatError(str(path), describe(err)) from None


def bounded(fs: Any, path: str, fn: Callable[[], T], what: str) -> T:
    """``fn()`` (a request to ``fs`` about ``path``), within the I/O time-out for a remote store; any failure
    as :class:`TraceFormatError` naming ``path``."""
    try:
        return call_with_deadline(fn, None if is_local(fs) else io_timeout(), what)
    except TraceFormatError:
        raise
    except DeadlineExceeded as err:
        failure = getattr(fs, "_streamprof_last_failure", None)
        if failure is not None and failure.error is not None:
            reason = f"{describe(failure.error)}; still failing after {err.seconds:g} s of retries"
            raise TraceFormatError(str(path), reason) from None
        raise TraceFormatError(str(path), describe(err)) from None
    except FileNotFoundError:
        raise TraceFormatError(str(path), "no such file or directory") from None
    except IsADirectoryError:
        raise TraceFormatError(str(path), "is a directory") from None
    except Exception as err:  # noqa: BLE001 - every reason, in one line
        raise TraceFormatError(str(path), describe(err)) from None


class _Reader:
    """``read`` of an open file, each call bounded in time, and in all no more than ``size`` bytes (the file's size
    when opened; ``None``: unknown)."""

    def __init__(self, fs: Any, path: str, f: Any, size: int | None) -> None:
        self._fs, self._path, self._f = fs, path, f
        self.size = size
        self._left = size

    def read(self, size: int = -1) -> bytes:
        if self._left is not None:
            size = self._left if size < 0 else min(size, self._left)
            if size == 0:
                return b""
        data = bounded(self._fs, self._path, lambda: self._f.read(size), f"reading {self._path}")
        if self._left is not None:
            self._left -= len(data)
        return data


def _not_regular(path: str, mode: int) -> TraceFormatError:
    if stat.S_ISDIR(mode):
        return TraceFormatError(path, "is a directory")
    return TraceFormatError(path, f"not a regular file ({kind_of(mode)})")


def _open_local(path: str, local: str) -> tuple[Any, int]:
    """A local regular file open for reading, and its size. Anything else is refused at once: the file is opened
    without blocking (a FIFO would wait for a writer) and checked before it is read."""
    try:
        mode = os.stat(local).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        fd = os.open(local, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except TraceFormatError:
        raise
    except FileNotFoundError:
        raise TraceFormatError(path, "no such file or directory") from None
    except OSError as err:
        raise TraceFormatError(path, describe(err)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # replaced since the first look
        os.close(fd)
        raise _not_regular(path, st.st_mode)
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), st.st_size


@contextlib.contextmanager
def opened(path: str) -> Iterator[_Reader]:
    """The file at ``path`` open for bounded reads (a local path: a regular file only)."""
    fs, local = filesystem(path)
    if is_local(fs):
        f, size = _open_local(path, local)
    else:
        f = bounded(fs, path, lambda: fs.open(local, "rb"), f"opening {path}")
        size = getattr(f, "size", None)
    try:
        yield _Reader(fs, path, f, size if isinstance(size, int) else None)
    finally:
        with contextlib.suppress(Exception):
            f.close()


def read_text(path: str, limit: int) -> str:
    """The UTF-8 text of a small file beside the traces (StreamPipeline's notes, a summary), read as a trace is: a
    regular file only, each request bounded in time, no more than ``limit`` bytes; :class:`TraceFormatError`
    naming ``path`` for anything else (too large, not UTF-8, not there)."""
    with opened(path) as f:
        if f.size is not None and f.size > limit:
            raise TraceFormatError(path, f"larger than {limit:,} bytes ({f.size:,} bytes)")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TraceFormatError(path, f"larger than {limit:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TraceFormatError(path, f"not UTF-8 text (byte {err.start})") from None
