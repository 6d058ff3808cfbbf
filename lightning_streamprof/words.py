"""Counts in words: ``1 window``, ``3 windows``, ``1 run``."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun in the plural (``plural``, else ``noun + "s"``) unless ``n`` is 1."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
