"""A progress bar on the terminal while traces are read: for a remote URL, or a directory of several traces."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Callable

#: a directory with at least this many traces gets a bar (a remote URL always does)
MANY_TRACES = 3


def is_remote(path: str | Sequence[str]) -> bool:
    """An fsspec URL other than a local file (any of several paths)."""
    if isinstance(path, (list, tuple)):
        return any(is_remote(p) for p in path)
    scheme, sep, _ = str(path).partition("://")
    return bool(sep) and scheme not in ("file", "local")


def wants_bar(path: str | Sequence[str], total: int) -> bool:
    return is_remote(path) or total >= MANY_TRACES


@contextmanager
def reading(path: str | Sequence[str], stream: Any = None,
            force: bool | None = None) -> Iterator[Callable[[int, int, str], None]]:
    """A ``progress(done, total, trace)`` callback drawing a transient bar on ``stream`` (stderr) when it is a
    terminal (or ``force``) and :func:`wants_bar`; it draws nothing otherwise."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    stream = stream if stream is not None else sys.stderr
    console = Console(file=stream, force_terminal=force) if force is not None else Console(file=stream)
    state: dict[str, Any] = {}

    def update(done: int, total: int, trace: str) -> None:
        if not console.is_terminal or not wants_bar(path, total):
            return
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = Progress(TextColumn("reading traces"), BarColumn(), MofNCompleteColumn(),
                                          TimeElapsedColumn(), TextColumn("{task.fields[name]}"),
                                          console=console, transient=True)
            bar.start()
            state["task"] = bar.add_task("read", total=total, name="")
        bar.update(state["task"], completed=done, name=trace.rsplit("/", 1)[-1])

    try:
        yield update
    finally:
        if "bar" in state:
            state["bar"].stop()
