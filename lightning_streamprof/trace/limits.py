"""How much the reader takes from one trace: a regular file's bytes (its size when opened), of a gzipped trace at
most :func:`inflate_limit` bytes inflated, and at most :func:`value_limit` values. Both limits scale with the file
and lie far above any real trace (Kineto's JSON gzips about 10 to 1), so that a gzip bomb, or a few megabytes of
``0,0,0,...`` that would take gigabytes as Python objects and table rows, is refused before it takes the machine's
memory."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from lightning_streamprof.words import byte_size

#: environment variable overriding :data:`DEFAULT_RATIO`
RATIO_ENV = "STREAMPROF_MAX_INFLATE"
#: a gzipped trace may inflate to this many times its size...
DEFAULT_RATIO = 100
#: ... and always to this many bytes
FLOOR = 256 << 20


class InflateLimit(Exception):
    """Gzipped data inflated past ``limit`` bytes; the reader words it (:func:`describe_limit`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"inflates past {limit} bytes")
        self.limit = limit


def _factor(name: str, default: float) -> float:
    """The positive number in the environment variable ``name``, else ``default``."""
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def ratio() -> float:
    """How many times its size a gzipped trace may inflate to: ``$STREAMPROF_MAX_INFLATE``, else 100."""
    return _factor(RATIO_ENV, DEFAULT_RATIO)


def inflate_limit(compressed_size: int | None) -> int:
    """Bytes a gzipped trace of ``compressed_size`` bytes may inflate to (unknown size: :data:`FLOOR` x the ratio)."""
    size = FLOOR if compressed_size is None else compressed_size
    return max(FLOOR, int(ratio() * size))


def describe_limit(limit: int, compressed_size: int | None) -> str:
    """The reason of a trace refused at ``limit``, in one line."""
    of = f"{ratio():g} x its {byte_size(compressed_size)}" if compressed_size is not None else "the limit"
    return (f"inflates to more than {byte_size(limit)} ({of}, at least {byte_size(FLOOR)}; a gzip bomb? "
            f"${RATIO_ENV} sets the factor)")


# ------------------------------------------------------------------------------------------------ values
#: environment variable overriding :data:`VALUES_PER_BYTE`
VALUES_ENV = "STREAMPROF_MAX_VALUES"
#: a trace may hold this many values per byte of its file...
VALUES_PER_BYTE = 10
#: ... and always this many
VALUES_FLOOR = 1 << 23


class ValueLimit(Exception):
    """The document holds more than ``limit`` values; the reader words it (:func:`describe_values`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} values")
        self.limit = limit


def values_per_byte() -> float:
    """``$STREAMPROF_MAX_VALUES``, else :data:`VALUES_PER_BYTE`."""
    return _factor(VALUES_ENV, VALUES_PER_BYTE)


def value_limit(file_size: int | None) -> int:
    """Values (list entries and object members, as :func:`count_values` counts them) a trace whose file has
    ``file_size`` bytes may hold; unknown size: as for a file of :data:`FLOOR` bytes.

    Every value costs memory whatever its bytes (a ``0,`` is a pointer, an event a table row), so a count bounds
    what the bytes do not: 38 KB of gzipped ``0,`` are 20 million values. Real traces hold 0.05 to 0.07 values per
    byte of JSON (the traces in ``tests/fixtures``, HTA's among them), 0.5 to 1 per byte of ``.gz``: a 2 GB trace,
    about 200 MB gzipped, has 110 to 140 million and may hold 2 billion (a plain one 20 billion). The floor, 8.4
    million values (at most about 700 MB as table rows or Python objects, at 60 to 90 bytes each), is 120 to 150 MB
    of such JSON: a file under 840 KB reaches it only by gzipping over 140 to 1 (real traces: 10 to 15 to 1).
    """
    size = FLOOR if file_size is None else file_size
    return max(VALUES_FLOOR, int(values_per_byte() * size))


def count_values(data: bytes | bytearray | memoryview) -> int:
    """An upper bound of the values in JSON text, without parsing: a container of n values has n - 1 commas and
    one opening bracket, so values <= commas + opening brackets (those inside strings only add)."""
    if isinstance(data, memoryview):
        data = data.tobytes()
    return data.count(b",") + data.count(b"[") + data.count(b"{")


def counted(blocks: Iterable[bytes], limit: int | None) -> Iterator[bytes]:
    """``blocks``, raising :class:`ValueLimit` as soon as they hold more than ``limit`` values (None: no limit)."""
    total = 0
    for block in blocks:
        if limit is not None:
            total += count_values(block)
            if total > limit:
                raise ValueLimit(limit)
        yield block


def describe_values(limit: int, file_size: int | None) -> str:
    """The reason of a trace refused at ``limit`` values, in one line."""
    of = f"{values_per_byte():g} per byte of its {byte_size(file_size)}" if file_size is not None else "the limit"
    return (f"too many values (more than {limit:,} list entries and object members: {of}, at least "
            f"{VALUES_FLOOR:,}; ${VALUES_ENV} sets the factor)")
