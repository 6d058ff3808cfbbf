"""The chunked reader: raw pieces -> decompressed blocks -> event chunks -> table columns."""

from __future__ import annotations

from collections.abc import Iterable

from lightning_streamprof.trace import blocks, split
from lightning_streamprof.trace.checks import OutOfRange
from lightning_streamprof.trace.columns import ColumnBuilder
from lightning_streamprof.trace.table import EventTable, TraceFormatError


def decompressed(pieces: Iterable[bytes]) -> Iterable[bytes]:
    """The document's bytes: gunzipped if the first piece starts with the gzip magic."""
    it = iter(pieces)
    first = next(it, b"")

    def chained():
        yield first
        yield from it

    if bytes(first[:2]) == blocks.GZIP_MAGIC:
        return blocks.gunzip(chained())
    return chained()


def read_chunked(pieces: Iterable[bytes], source: str, chunk_size: int = split.CHUNK_SIZE) -> EventTable | None:
    """The table of a Kineto-layout document, or None where the document needs the whole-document reader."""
    builder = ColumnBuilder()
    splitter = split.EventSplitter(decompressed(pieces), chunk_size)
    try:
        splitter.run(builder.add_json)
        metadata = split.metadata(splitter.head, splitter.tail)
    except (OSError, EOFError):
        raise
    except OutOfRange as err:
        raise TraceFormatError(source, str(err)) from None
    except TraceFormatError:
        raise
    except Exception:
        return None
    return builder.finish(source, metadata)
