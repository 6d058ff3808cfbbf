"""Counts and sizes in words: ``1 window``, ``3 windows``, ``1 run``, ``2.0 MiB``."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun in the plural (``plural``, else ``noun + "s"``) unless ``n`` is 1."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def byte_size(n: int) -> str:
    """``n`` bytes in the largest binary unit it reaches, one decimal: ``1.5 GiB``, ``2.0 MiB``, ``12 bytes``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
