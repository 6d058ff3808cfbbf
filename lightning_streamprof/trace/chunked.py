"""The chunked reader: raw pieces -> decompressed blocks -> event chunks -> table columns."""

from __future__ import annotations

from collections.abc import Iterable

from lightning_streamprof.trace import blocks, split
from lightning_streamprof.trace.checks import OutOfRange
from lightning_streamprof.trace.columns import ColumnBuilder
from lightning_streamprof.trace.limits import InflateLimit, ValueLimit, counted, describe_limit, describe_values
from lightning_streamprof.trace.table import EventTable, TraceFormatError


def decompressed(pieces: Iterable[bytes], limit: int | None = None) -> Iterable[bytes]:
    """The document's bytes: gunzipped (at most ``limit`` bytes) if the first piece starts with the gzip magic."""
    it = iter(pieces)
    first = next(it, b"")

    def chained():
        yield first
        yield from it

    if bytes(first[:2]) == blocks.GZIP_MAGIC:
        return blocks.gunzip(chained(), limit)
    return chained()


def read_chunked(pieces: Iterable[bytes], source: str, chunk_size: int = split.CHUNK_SIZE,
                 limit: int | None = None, size: int | None = None, values: int | None = None) -> EventTable | None:
    """The table of a Kineto-layout document, or None where the document needs the whole-document reader;
    a gzipped document inflating past ``limit`` bytes (of a file of ``size``), or holding more than ``values``
    values (counted as the bytes arrive, before they are decoded), is refused."""
    builder = ColumnBuilder()
    splitter = split.EventSplitter(counted(decompressed(pieces, limit), values), chunk_size)
    try:
        splitter.run(builder.add_json)
        metadata = split.metadata(splitter.head, splitter.tail)
    except (OSError, EOFError):
        raise
    except InflateLimit as err:
        raise TraceFormatError(source, describe_limit(err.limit, size)) from None
    except ValueLimit as err:
        raise TraceFormatError(source, describe_values(err.limit, size)) from None
    except OutOfRange as err:
        raise TraceFormatError(source, str(err)) from None
    except TraceFormatError:
        raise
    except Exception:
        return None
    return builder.finish(source, metadata)
