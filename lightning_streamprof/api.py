"""``analyze(path_or_url)``: one trace file, or a directory of them, to analysis results."""

from __future__ import annotations

import os
from typing import Any

from lightning_streamprof.storage import filesystem
from lightning_streamprof.trace.reader import TraceFormatError, read_trace

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json", ".json.gz")


def find_traces(path: str) -> list[str]:
    """``path`` itself if it is a file, else every Kineto trace below it (sorted); fsspec URLs work."""
    fs, local = filesystem(str(path))
    if not fs.exists(local):
        raise TraceFormatError(str(path), "no such file or directory")
    if not fs.isdir(local):
        return [str(path)]
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    prefix = "" if protocol in ("file", "local") else f"{protocol}://"
    found = sorted(p for p in fs.find(local) if p.endswith(TRACE_SUFFIXES[:2]))
    if not found:
        found = sorted(p for p in fs.find(local) if p.endswith(TRACE_SUFFIXES[2:]))
    if not found:
        raise TraceFormatError(str(path), "directory holds no Kineto trace (*.pt.trace.json[.gz])")
    return [prefix + p if prefix and not p.startswith(prefix) else p for p in found]


def analyze_path(path: str) -> dict[str, Any]:
    """Analysis JSON (the public contract, see README) of one trace file."""
    from lightning_streamprof.analysis import analyze_table

    table = read_trace(path)
    result = analyze_table(table).to_json()
    info = table.metadata.get("distributedInfo") or {}
    result["trace"] = {"path": str(path), "rank": info.get("rank"), "world_size": info.get("world_size")}
    return result


def analyze(path: str | os.PathLike) -> dict[str, Any]:
    """Analyse a trace file, or every trace in a directory (local path or fsspec URL).

    For one file the result is that trace's analysis. For several, per-trace results are under
    ``"traces"`` and the top-level keys combine them (see :func:`lightning_streamprof.analysis.merge`).
    Raises :class:`TraceFormatError` naming the file for anything that is not a readable Kineto trace.
    """
    paths = find_traces(str(path))
    results = [analyze_path(p) for p in paths]
    if len(results) == 1:
        return results[0]
    from lightning_streamprof.analysis import merge_results

    return merge_results(results)
