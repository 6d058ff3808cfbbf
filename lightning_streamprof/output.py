"""Writing a file without destroying what was there.

:func:`write_atomic` writes a regular file through a temporary name beside it, then renames it into place: an
earlier file survives a failed write, none is left cut off or empty, and no temporary file stays behind (on an
error, or when the program exits during the write). What is not a regular file is never replaced:

- a directory, FIFO, socket or device at the target is refused (:class:`NotRegularFile`), except the null device,
  which takes the bytes as it would from any program, and the process's own standard output or error
  (``/dev/stdout``, ``/dev/fd/2``), written to as the user means;
- a symbolic link is written through: the file it points to is replaced, the link stays.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import stat
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from lightning_streamprof.locations import filesystem, is_local, join_path, local_path

#: what a target that is not a regular file is, by ``stat``'s file type
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class NotRegularFile(ValueError):
    """The target exists and is not a regular file (nor a symbolic link to one); the message says what it is."""


def kind_of(mode: int) -> str:
    """What a file of ``mode`` that is not regular is, in words (``a FIFO``)."""
    return next((what for test, what in _KINDS if test(mode)), "an unknown kind of file")


#: temporary files of local writes under way (an export thread's at the program's exit), removed at exit; a remote
#: store's object appears only when its upload completes, so an upload cut by the exit leaves none (and the store
#: need not be reachable then)
_in_flight: set[tuple[Any, str]] = set()
_in_flight_lock = threading.Lock()


def write_atomic(path: str, data: bytes, make_parents: bool = True) -> None:
    """Write ``data`` to ``path`` (a local path or fsspec URL) through a temporary name beside it (see the module);
    on any failure the temporary file is removed and the error raised. ``make_parents``: create the missing
    directories above ``path``. :class:`NotRegularFile` for a target that may not be replaced."""
    fs, target = filesystem(path)
    if is_local(fs):
        _write_local(target, data, make_parents)
        return
    parent = target.rsplit("/", 1)[0] if "/" in target else ""
    if parent and make_parents:
        fs.makedirs(parent, exist_ok=True)
    tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        with fs.open(tmp, "wb") as f:
            f.write(data)
        fs.mv(tmp, target)
    except BaseException:
        _remove(fs, tmp)
        raise


def _write_local(target: str, data: bytes, make_parents: bool) -> None:
    real = os.path.realpath(target)  # a link is written through
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_special(target, real, st, data)
        return
    parent = os.path.dirname(real)
    if make_parents and parent:
        os.makedirs(parent, exist_ok=True)
    tmp = f"{real}.tmp-{uuid.uuid4().hex[:8]}"
    with _in_flight_lock:
        _in_flight.add((None, tmp))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            if st is not None:
                os.chmod(fd, stat.S_IMODE(st.st_mode))  # the file keeps its permissions
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, real)  # onto a directory made since the look above: IsADirectoryError, nothing replaced
    except BaseException:
        _remove(None, tmp)
        raise
    finally:
        with _in_flight_lock:
            _in_flight.discard((None, tmp))


def _write_special(target: str, real: str, st: os.stat_result, data: bytes) -> None:
    """Write into the null device or this process's stdout/stderr; refuse any other file that is not regular."""
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        if _same_file(fd, st):
            with contextlib.suppress(Exception):
                stream.flush()  # what the program printed comes first
            _write_all(fd, data)
            return
    if stat.S_ISCHR(st.st_mode) and _is_null_device(st):
        return
    raise NotRegularFile(f"not a regular file ({kind_of(st.st_mode)}); refused, it is never replaced (- writes to"
                         " standard output)")


def _same_file(fd: int, st: os.stat_result) -> bool:
    try:
        other = os.fstat(fd)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)


def _is_null_device(st: os.stat_result) -> bool:
    """Whether ``st`` is the null device itself (a copy made with ``mknod`` is another file and is refused)."""
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return (null.st_dev, null.st_ino) == (st.st_dev, st.st_ino)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _remove(fs: Any, path: str) -> None:
    with contextlib.suppress(Exception):  # a half-written temporary file never stays behind
        if fs is None:
            if os.path.lexists(path):
                os.remove(path)
        elif fs.exists(path):
            fs.rm(path)


@atexit.register
def _remove_in_flight() -> None:
    """At exit: the temporary files of writes still under way (their threads die with the program)."""
    with _in_flight_lock:
        pending = list(_in_flight)
    for fs, tmp in pending:
        _remove(fs, tmp)


class OutputRefused(ValueError):
    """An output the command will not write (one of its inputs, a trace's name in a run it reads); the message
    names the file and the reason."""


def is_stdout(path: str) -> bool:
    """Whether ``path`` means this process's standard output: ``-``, or a path to the same file (``/dev/stdout``,
    ``/dev/fd/1``)."""
    if path == "-":
        return True
    local = local_path(path)
    if local is None:
        return False
    try:
        return _same_file(1, os.stat(local))
    except OSError:
        return False


def output_file(path: str, default_name: str, inputs: Sequence[str], read_as_trace: Callable[[str], bool]) -> str:
    """The file that a command's ``-o path`` writes: ``path/<default_name>`` when ``path`` is a directory or ends
    with ``/`` (made if missing), else ``path``. :class:`OutputRefused` when that file is one of ``inputs`` or lies
    in one of them under a name that ``read_as_trace`` says would be read as a trace."""
    local = local_path(path)
    if local is None:
        fs, target = filesystem(path)
        into = path.endswith("/") or fs.isdir(target)
        out = join_path(path, default_name) if into else path
        for given in inputs:
            if out.rstrip("/") == given.rstrip("/"):
                raise OutputRefused(f"{path}: is one of the inputs; refused, it would be overwritten")
        return out
    into = path.endswith(("/", os.sep)) or os.path.isdir(local)
    if into:
        os.makedirs(local, exist_ok=True)
    out = os.path.join(path, default_name) if into else path
    real = os.path.realpath(os.path.join(local, default_name) if into else local)
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(real)
        if not stat.S_ISREG(st.st_mode) and not _is_null_device(st):
            raise OutputRefused(f"{out}: not a regular file ({kind_of(st.st_mode)}); refused, it is never replaced"
                                " (- writes to standard output)")
    for given in inputs:
        given_local = local_path(given)
        if given_local is None:
            continue
        source = os.path.realpath(given_local)
        if real == source:
            raise OutputRefused(f"{out}: is one of the inputs; refused, it would be overwritten")
        if os.path.isdir(source) and real.startswith(source.rstrip(os.sep) + os.sep) and read_as_trace(real):
            if os.path.lexists(real):
                raise OutputRefused(f"{out}: is one of the inputs (a trace in {given}); refused, it would be"
                                    " overwritten")
            raise OutputRefused(f"{out}: lies in {given}, which is being read, under a trace's name; refused, it"
                                " would be read as a trace next time")
    return out
