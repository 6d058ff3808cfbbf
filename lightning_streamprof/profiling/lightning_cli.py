"""LightningCLI: a :class:`~lightning_streamprof.StreamProfiler` argument that is refused
(``--trainer.profiler.every=-1``) ends the command with one line and exit 2, as argparse does for any wrong
value, instead of the error twice in two tracebacks (jsonargparse wraps what the constructor raises)."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from lightning_streamprof.escape import one_line


def register(cls: type) -> None:
    """Have jsonargparse (when installed) build ``cls`` and its subclasses through :func:`_instantiate`."""
    if importlib.util.find_spec("jsonargparse") is None:
        return
    import jsonargparse

    add_instantiator = getattr(jsonargparse, "add_instantiator", None)  # older releases have none: a traceback
    if add_instantiator is not None:
        add_instantiator(_instantiate, cls, subclasses=True)


def _instantiate(class_type: type, *args: Any, **kwargs: Any) -> Any:
    try:
        return class_type(*args, **kwargs)
    except (TypeError, ValueError) as err:
        print(f"{os.path.basename(sys.argv[0]) or 'error'}: error: {one_line(str(err))}", file=sys.stderr)
        raise SystemExit(2) from None
