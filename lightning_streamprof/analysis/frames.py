"""Python frames of ``with_stack`` traces: which are user code, and their file, line and function."""

from __future__ import annotations

import re
import sys

#: top-level packages whose frames are library code, not the user's
LIBRARY_PACKAGES: frozenset[str] = frozenset({
    "torch", "torchvision", "torchaudio", "torchmetrics", "lightning", "lightning_fabric", "pytorch_lightning",
    "lightning_utilities", "lightning_streamprof", "numpy", "typing_extensions", "triton", "tqdm", "fsspec",
    "importlib_metadata", "packaging", "pkg_resources", "setuptools", "_pytest", "pluggy", "kornia", "PIL",
})

_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<function>.+)$")


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """``(file, line, function)`` of a ``python_function`` name (``path/file.py(123): fn``), else None."""
    match = _FRAME.match(name)
    return (match["file"], int(match["line"]), match["function"]) if match else None


def is_user_frame(name: str) -> bool:
    """Whether a ``python_function`` name is user code (not the standard library or a known library)."""
    frame = parse_frame(name)
    if frame is None:
        return False
    path = frame[0].replace("\\", "/")
    if path.startswith("<") or "site-packages/" in path or "dist-packages/" in path:
        return False
    top = path.split("/", 1)[0]
    module = top[:-3] if top.endswith(".py") else top
    return module not in LIBRARY_PACKAGES and module not in sys.stdlib_module_names
