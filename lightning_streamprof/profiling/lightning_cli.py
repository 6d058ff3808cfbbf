"""LightningCLI: a :class:`~lightning_streamprof.StreamProfiler` argument that is refused
(``--trainer.profiler.every=-1``) ends the command with one line and exit 2, as argparse does for any wrong
value, instead of the error twice in two tracebacks (jsonargparse wraps what the constructor raises); so does an
argument the class does not have (``--trainer.profiler.evry=50``), with the closest names, instead of jsonargparse's
usage and Union report (60 lines)."""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import os
import re
import sys
from typing import Any

from lightning_streamprof.escape import one_line


#: the classes whose arguments get one-line errors
_CLASSES: list[type] = []
_UNKNOWN_OPTION = re.compile(r"Parser key \"([\w.]+)\":.*?class_path '([\w.]+)':\s*Option '(\w+)' is not accepted",
                             re.S)


def register(cls: type) -> None:
    """Have jsonargparse (when installed) build ``cls`` and its subclasses through :func:`_instantiate`, and say an
    argument ``cls`` does not have in one line."""
    if importlib.util.find_spec("jsonargparse") is None:
        return
    import jsonargparse

    add_instantiator = getattr(jsonargparse, "add_instantiator", None)  # older releases have none: a traceback
    if add_instantiator is not None:
        add_instantiator(_instantiate, cls, subclasses=True)
    if cls not in _CLASSES:
        _CLASSES.append(cls)
    _wrap_error(jsonargparse.ArgumentParser)


def unknown_option(message: str) -> str | None:
    """``--trainer.profiler.evry: StreamProfiler has no argument 'evry'; did you mean 'every'?`` for jsonargparse's
    report of an option one of the registered classes does not accept; None for any other message."""
    found = _UNKNOWN_OPTION.search(message)
    if found is None:
        return None
    key, class_path, option = found.groups()
    owner = next((c for c in _CLASSES if class_path.rsplit(".", 1)[-1] == c.__name__), None)  # a short import path
    owner = owner or next((c for c in _CLASSES if class_path.startswith(c.__module__ + ".")), None)  # a short name
    if owner is None:
        return None
    accepted = [n for n in inspect.signature(owner.__init__).parameters if n not in ("self", "args", "kwargs")]
    close = difflib.get_close_matches(option, accepted, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(map(repr, close))}?" if close else f"its arguments: {', '.join(accepted)}"
    return f"--{key}.{option}: {owner.__name__} has no argument {option!r}; {hint}"


def _wrap_error(parser_class: type) -> None:
    """Route the parser's errors through :func:`unknown_option` first (once)."""
    original = parser_class.error
    if getattr(original, "_streamprof", False):
        return

    def error(self: Any, message: str, ex: Exception | None = None) -> Any:
        line = unknown_option(message) if getattr(self, "exit_on_error", True) else None
        if line is None:
            return original(self, message, ex)
        print(f"{os.path.basename(sys.argv[0]) or 'error'}: error: {line}", file=sys.stderr)
        raise SystemExit(2)

    error._streamprof = True  # type: ignore[attr-defined]
    parser_class.error = error


def _instantiate(class_type: type, *args: Any, **kwargs: Any) -> Any:
    try:
        return class_type(*args, **kwargs)
    except (TypeError, ValueError) as err:
        print(f"{os.path.basename(sys.argv[0]) or 'error'}: error: {one_line(str(err))}", file=sys.stderr)
        raise SystemExit(2) from None
