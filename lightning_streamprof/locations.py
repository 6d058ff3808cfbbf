"""Where a file lives: a local path, or an fsspec URL — and a URL only when it names its protocol.

fsspec reads ``a::b`` as a chain of URLs (``a`` through ``b``), so a local directory with ``::`` in its name would be
taken apart. Here a path is a URL only when it starts with a protocol followed by ``://`` (``s3://bucket/x``,
``memory://x``, ``file:///tmp/x``) or is a chain that names one (``simplecache::s3://bucket/x``); anything else,
``::`` or not, is a local path.
"""

from __future__ import annotations

import os
import re
from typing import Any

from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

#: a protocol at the start of a URL, before ``://`` or a chain's ``::``
_PROTOCOL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*(?:://|::)")
_LOCAL_PREFIX = "file://"


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an fsspec URL (it names a protocol), not a local path."""
    text = os.fspath(path)
    return "://" in text and _PROTOCOL.match(text) is not None


def local_path(path: str | os.PathLike[str]) -> str | None:
    """``path`` as an absolute local path (``file://`` removed), or None for a URL of another store."""
    text = os.fspath(path)
    if text.startswith(_LOCAL_PREFIX) and "://" not in text[len(_LOCAL_PREFIX):]:
        text = text[len(_LOCAL_PREFIX):]
    elif is_url(text):
        return None
    return LocalFileSystem._strip_protocol(text)


def filesystem(path: str | os.PathLike[str], **options: Any) -> tuple[Any, str]:
    """The fsspec filesystem of ``path`` and the path as that filesystem names it; a local path is never split
    at ``::``. ``options`` go to a remote filesystem."""
    local = local_path(path)
    if local is not None:
        return LocalFileSystem(), local
    return url_to_fs(os.fspath(path), **options)


def is_local(fs: Any) -> bool:
    """Whether ``fs`` is the local filesystem."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return any(p in ("file", "local") for p in protocols)


def join_path(base: str, *parts: str) -> str:
    """Join path parts with ``/``, keeping a URL's scheme (``s3://bucket`` + ``a`` -> ``s3://bucket/a``)."""
    out = str(base).rstrip("/") or "/"
    for part in parts:
        out = f"{out}/{part.strip('/')}" if out != "/" else f"/{part.strip('/')}"
    return out
