"""Reading Kineto traces (local or fsspec, ``.json`` or ``.json.gz``) into a columnar event table."""

from lightning_streamprof.trace.reader import EventTable, Kind, TraceFormatError, parse_trace, read_trace

__all__ = ["EventTable", "Kind", "TraceFormatError", "parse_trace", "read_trace"]
