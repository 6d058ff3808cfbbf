"""The decompressed bytes of a trace as a stream of blocks, gzip decoded by isal (ISA-L)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from isal.isal_zlib import decompressobj as _decompressobj

#: compressed bytes fed to the decompressor at a time (bounds each decompressed block)
GZIP_FEED = 1 << 20
#: bytes read from an uncompressed source at a time
READ_SIZE = 4 << 20

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


def gunzip(pieces: Iterable[bytes | memoryview]) -> Iterator[bytes]:
    """Decompress a (possibly multi-member) gzip stream given as compressed pieces."""
    decomp = _decompressobj(wbits=31)
    started = False
    try:
        for piece in _slices(pieces, GZIP_FEED):
            while piece:
                started = True
                out = decomp.decompress(piece)
                if out:
                    yield out
                if not decomp.eof:
                    break
                piece = decomp.unused_data
                if piece and piece[:2] != GZIP_MAGIC:
                    raise BadGzip("trailing garbage after gzip data")
                decomp = _decompressobj(wbits=31)
                started = False
    except BadGzip:
        raise
    except Exception as err:
        raise BadGzip(str(err)) from None
    if started and not decomp.eof:
        raise BadGzip("truncated gzip data")

