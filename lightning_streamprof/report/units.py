"""The units every renderer shows: milliseconds from the results' nanoseconds, percent from their fractions, MiB
from their bytes. The numbers (:func:`ms`, :func:`mib`) are for tables that format and sort them; the texts
(``*_text``) for lines of prose and terminal cells."""

from __future__ import annotations

NS_PER_MS = 1e6
BYTES_PER_MIB = 2**20
#: what a fraction that the trace has no data for is shown as
UNKNOWN = "n/a"


def ms(ns: float) -> float:
    """Nanoseconds as milliseconds (not rounded)."""
    return float(ns) / NS_PER_MS


def mib(n_bytes: float) -> float:
    """Bytes as MiB (not rounded)."""
    return float(n_bytes) / BYTES_PER_MIB


def ms_text(ns: float, digits: int = 3) -> str:
    """``1.234``: nanoseconds as milliseconds with ``digits`` decimals."""
    return f"{ms(ns):.{digits}f}"


def mib_text(n_bytes: float, digits: int = 1) -> str:
    """``79.5``: bytes as MiB with ``digits`` decimals."""
    return f"{mib(n_bytes):.{digits}f}"


def pct_text(fraction: float | None, digits: int = 1) -> str:
    """``12.3%``: a fraction in percent, :data:`UNKNOWN` for None."""
    return UNKNOWN if fraction is None else f"{100 * fraction:.{digits}f}%"
