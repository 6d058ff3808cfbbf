"""Run directories: named ``<stage>-<YYYYmmdd-HHMMSS>.<milliseconds>-<6 hex digits>``, and made only where none
existed.

Runs started in the same second (``trainer.validate`` in a loop, two jobs started together on one ``dirpath``) get
their own directories: the hex digits count on from a random start drawn once per process, so that one process never
repeats a name (for 16.7 million names) and two processes are kept apart even within one millisecond.
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading
import time
from collections.abc import Callable

from lightning_streamprof.profiling.storage import filesystem, join_path


_SUFFIXES = 1 << 24
_suffix = itertools.count(secrets.randbelow(_SUFFIXES))
_suffix_lock = threading.Lock()


def _new_start() -> None:
    """A forked process draws its own start (else it would repeat its parent's names)."""
    global _suffix, _suffix_lock
    _suffix, _suffix_lock = itertools.count(secrets.randbelow(_SUFFIXES)), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_start)


def new_run_name(stage: str, now: float | None = None) -> str:
    """A fresh run name for ``stage`` at ``now`` (seconds since the epoch; default: the current time)."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    with _suffix_lock:
        suffix = next(_suffix) % _SUFFIXES
    return f"{stage}-{stamp}.{int(now * 1000) % 1000:03d}-{suffix:06x}"


def make_fresh_dir(base: str, new_name: Callable[[], str], tries: int = 8) -> str:
    """Make a directory under ``base`` (a local path or fsspec URL) named by ``new_name()`` where none existed;
    its name. ``FileExistsError`` when ``tries`` names were all taken."""
    fs, root = filesystem(base)
    for _ in range(tries):
        name = new_name()
        if not fs.exists(join_path(root, name)):
            fs.makedirs(join_path(root, name), exist_ok=True)
            return name
    raise FileExistsError(f"{tries} fresh names were all taken")
