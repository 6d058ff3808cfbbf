"""The profiler's files: directories made on local disk or an fsspec store, files written without destroying what
was there (:mod:`lightning_streamprof.output`), temporary traces removed."""

from __future__ import annotations

import contextlib
import os

from lightning_streamprof.locations import filesystem, join_path
from lightning_streamprof.output import write_atomic

__all__ = ["ensure_dir", "filesystem", "join_path", "remove_local", "write_atomic"]


def ensure_dir(path: str) -> None:
    fs, local = filesystem(path)
    fs.makedirs(local, exist_ok=True)


def remove_local(*paths: str) -> None:
    """Remove local files (temporary traces), each if it is there."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)
