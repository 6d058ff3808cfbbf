"""The decompressed bytes of a trace as a stream of blocks, gzip decoded by isal (ISA-L)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from isal.isal_zlib import decompressobj as _decompressobj

from lightning_streamprof.trace.limits import InflateLimit

#: compressed bytes fed to the decompressor at a time (bounds each decompressed block)
GZIP_FEED = 1 << 20
#: bytes read from an uncompressed source at a time
READ_SIZE = 4 << 20
#: most bytes one decompression call returns
OUT_BLOCK = 4 << 20

GZIP_MAGIC = b"\x1f\x8b"


class BadGzip(Exception):
    """Corrupt or truncated gzip data; the caller decides how to report it."""


def file_pieces(read: Callable[[int], bytes], first: bytes, size: int) -> Iterator[bytes]:
    """``first``, then ``read(size)`` until it returns nothing."""
    if first:
        yield first
    while piece := read(size):
        yield piece


def memory_pieces(data: bytes | memoryview, size: int) -> Iterator[memoryview]:
    """Slices of ``data`` of ``size`` bytes, without copying."""
    view = memoryview(data)
    for start in range(0, len(view), size):
        yield view[start : start + size]


def _slices(pieces: Iterable[bytes | memoryview], size: int) -> Iterator[memoryview]:
    for piece in pieces:
        view = memoryview(piece)
        for start in range(0, len(view), size):
            yield view[start : start + size]


def gunzip(pieces: Iterable[bytes | memoryview], limit: int | None = None) -> Iterator[bytes]:
    """Decompress a (possibly multi-member) gzip stream given as compressed pieces, in blocks of at most
    :data:`OUT_BLOCK` bytes; :class:`~lightning_streamprof.trace.limits.InflateLimit` past ``limit`` bytes."""
    decomp = _decompressobj(wbits=31)
    started = False
    total = 0
    try:
        for piece in _slices(pieces, GZIP_FEED):
            while piece:
                started = True
                while True:  # each call inflates at most OUT_BLOCK bytes: a bomb never lands in memory at once
                    out = decomp.decompress(piece, OUT_BLOCK)
                    total += len(out)
                    if limit is not None and total > limit:
                        raise InflateLimit(limit)
                    if out:
                        yield out
                    piece = decomp.unconsumed_tail
                    if decomp.eof or (not piece and len(out) < OUT_BLOCK):
                        break
                if not decomp.eof:
                    break
                piece = decomp.unused_data
                if piece and piece[:2] != GZIP_MAGIC:
                    raise BadGzip("trailing garbage after gzip data")
                decomp = _decompressobj(wbits=31)
                started = False
    except (BadGzip, InflateLimit):
        raise
    except Exception as err:
        raise BadGzip(str(err)) from None
    if started and not decomp.eof:
        raise BadGzip("truncated gzip data")


def gunzip_all(data: bytes | memoryview, limit: int | None = None) -> bytearray:
    """The whole inflated document of gzipped ``data``; :class:`BadGzip`, or ``InflateLimit`` past ``limit``."""
    out = bytearray()
    for block in gunzip([data], limit):
        out += block
    return out
