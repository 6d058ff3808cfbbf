"""One line saying what went wrong, for the command line and the profiler's warnings: the real reason from the
exception and its causes (connection refused, no credentials, a missing extra, disk full), never a traceback."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterator

from lightning_streamprof.escape import one_line


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def describe(err: BaseException) -> str:
    """The reason of ``err`` in one line (control characters escaped)."""
    chain = list(_chain(err))
    head = _first_line(err)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return one_line(f"connection refused ({head})")
    names = {type(e).__name__ for e in chain}
    if names & {"NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError"}:
        return one_line(f"no credentials ({head})")
    if isinstance(err, TimeoutError) or any(isinstance(e, TimeoutError) for e in chain[1:]):
        return one_line(head if "did not answer" in head else f"timed out ({head})")
    if isinstance(err, OSError) and err.strerror:
        where = f": {err.filename}" if err.filename else ""
        return one_line(f"{err.strerror}{where}")
    if isinstance(err, OSError) and err.errno in errno.errorcode:
        return one_line(f"{head} ({errno.errorcode[err.errno]})")
    if isinstance(err, (ValueError, LookupError, ImportError)) and str(err).strip():
        return one_line(head)
    return one_line(f"{type(err).__name__}: {head}" if str(err).strip() else type(err).__name__)


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err``, or an error it came from, says that the disk (or the quota) is full."""
    return any(isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) for e in _chain(err))


def run_command(command: Callable[[], int], expected: tuple[type[BaseException], ...], prog: str = "streamprof") -> int:
    """Run a command-line command and turn what it raises into one line on stderr and an exit status:
    ``expected`` errors (bad input: their message names the file) exit 2, Ctrl+C 130, a closed output pipe 0,
    anything else 1 as an internal error (``STREAMPROF_DEBUG=1`` shows the traceback instead)."""
    try:
        return command()
    except expected as err:
        print(f"{prog}: error: {one_line(str(err))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - no flush error at exit
        return 0
    except Exception as err:  # noqa: BLE001 - the one-line promise holds for bugs too
        if os.environ.get("STREAMPROF_DEBUG"):
            raise
        print(f"{prog}: internal error: {describe(err)} (STREAMPROF_DEBUG=1 shows where; please report it)",
              file=sys.stderr)
        return 1


def warn_lines(warnings: list[str], prog: str = "streamprof") -> None:
    """Each warning as one line on stderr."""
    for warning in warnings:
        print(f"{prog}: warning: {one_line(warning)}", file=sys.stderr)
