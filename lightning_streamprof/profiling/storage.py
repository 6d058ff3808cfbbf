"""Local paths and fsspec URLs behind one small interface."""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import uuid
from typing import Any

import fsspec
from fsspec.core import url_to_fs

from lightning_streamprof.trace.remote import is_local


def join_path(base: str, *parts: str) -> str:
    """Join path parts with ``/``, keeping a URL's scheme (``s3://bucket`` + ``a`` -> ``s3://bucket/a``)."""
    out = str(base).rstrip("/") or "/"
    for part in parts:
        out = f"{out}/{part.strip('/')}" if out != "/" else f"/{part.strip('/')}"
    return out


def filesystem(path: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``path`` and the path as that filesystem names it."""
    return url_to_fs(str(path))


def ensure_dir(path: str) -> None:
    fs, local = filesystem(path)
    fs.makedirs(local, exist_ok=True)


#: temporary files of local writes under way (an export thread's at the program's exit), removed at exit; a remote
#: store's object appears only when its upload completes, so an upload cut by the exit leaves none (and the store
#: need not be reachable then)
_in_flight: set[tuple[Any, str]] = set()
_in_flight_lock = threading.Lock()


def write_atomic(path: str, data: bytes, make_parents: bool = True) -> None:
    """Write ``data`` to a temporary name beside ``path``, then rename it into place, so that an earlier file
    survives a failed write and none is left cut off or empty; on any failure the temporary file is removed (best
    effort) and the error raised, and so it is when the program exits during the write (an export thread's, given
    up at the end). ``make_parents``: create the missing directories above ``path``."""
    fs, target = filesystem(path)
    parent = target.rsplit("/", 1)[0] if "/" in target else ""
    if parent and make_parents:
        fs.makedirs(parent, exist_ok=True)
    tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
    if is_local(fs):
        with _in_flight_lock:
            _in_flight.add((fs, tmp))
    try:
        with fs.open(tmp, "wb") as f:
            f.write(data)
        fs.mv(tmp, target)
    except BaseException:
        _remove(fs, tmp)
        raise
    finally:
        with _in_flight_lock:
            _in_flight.discard((fs, tmp))


def _remove(fs: Any, path: str) -> None:
    with contextlib.suppress(Exception):  # a half-written temporary file never stays behind
        if fs.exists(path):
            fs.rm(path)


@atexit.register
def _remove_in_flight() -> None:
    """At exit: the temporary files of writes still under way (their threads die with the program)."""
    with _in_flight_lock:
        pending = list(_in_flight)
    for fs, tmp in pending:
        _remove(fs, tmp)


def read_bytes(path: str) -> bytes:
    with fsspec.open(str(path), "rb") as f:
        return f.read()


def remove_local(*paths: str) -> None:
    """Remove local files (temporary traces), each if it is there."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)
