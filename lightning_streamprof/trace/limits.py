"""How much the reader takes from one trace: a regular file's bytes (its size when opened), and of a gzipped trace at
most :func:`inflate_limit` bytes inflated, a limit that scales with the file and lies far above any real trace
(Kineto's JSON gzips about 10 to 1), so that a gzip bomb is refused before it takes the machine's memory."""

from __future__ import annotations

import os

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


def ratio() -> float:
    """How many times its size a gzipped trace may inflate to: ``$STREAMPROF_MAX_INFLATE``, else 100."""
    try:
        value = float(os.environ.get(RATIO_ENV, DEFAULT_RATIO))
    except ValueError:
        return DEFAULT_RATIO
    return value if value > 0 else DEFAULT_RATIO


def inflate_limit(compressed_size: int | None) -> int:
    """Bytes a gzipped trace of ``compressed_size`` bytes may inflate to (unknown size: :data:`FLOOR` x the ratio)."""
    size = FLOOR if compressed_size is None else compressed_size
    return max(FLOOR, int(ratio() * size))


def describe_limit(limit: int, compressed_size: int | None) -> str:
    """The reason of a trace refused at ``limit``, in one line."""
    of = f"{ratio():g} x its {_size(compressed_size)}" if compressed_size is not None else "the limit"
    return (f"inflates to more than {_size(limit)} ({of}, at least {_size(FLOOR)}; a gzip bomb? "
            f"${RATIO_ENV} sets the factor)")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
