"""Split the ``traceEvents`` array of a Kineto document into JSON arrays of whole events.

The splitter only proposes cuts (``}`` , ``{`` between two events); a cut is proven right when its chunk
decodes as an array of event objects, and the document around the array (``head`` + ``tail``) is proven
right by :func:`metadata`. Anything unexpected raises :class:`NotSplittable`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import orjson

#: target size of one chunk of events
CHUNK_SIZE = 1 << 20
#: how far into the document the ``traceEvents`` key is looked for
MAX_HEAD = 64 << 20

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
_WS = b" \t\n\r"
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_SENTINEL = "\x00traceEvents\x00"
_SENTINEL_JSON = b'"\\u0000traceEvents\\u0000"'


class NotSplittable(Exception):
    """The document does not have the layout the splitter handles."""


class EventSplitter:
    """Cut the array into ``[event, ...]`` chunks; after :meth:`run`, ``head`` and ``tail`` hold the rest."""

    def __init__(self, blocks: Iterable[bytes], chunk_size: int = CHUNK_SIZE) -> None:
        self._blocks = iter(blocks)
        self.chunk_size = chunk_size
        self.head = b""
        self.tail = b""

    def run(self, consume: Callable[[bytes], None]) -> None:
        """Pass every chunk to ``consume``, which raises for a chunk that does not decode.

        A cut that falls inside a string or a nested array leaves the chunk truncated (the only way such a
        cut can fail); the chunk is then tried again at twice the length, so that an event holding a wide list
        of objects (a candidate cut every few bytes) costs a few decodes, not one per candidate.
        """
        pending = bytearray(self._find_start())  # grown in place: a long stretch without a cut costs linear time
        after = 0
        size = self.chunk_size  # the length wanted of the next chunk
        for block in self._blocks:
            pending += block
            start = 0
            while len(pending) - start >= size and len(pending) > after:
                found = _boundary(pending, start, max(start + size, after), after)
                if found is None:  # no cut before the end: the next one starts in bytes still to come
                    after = len(pending)
                    break
                try:
                    consume(b"[" + pending[start : found[0] + 1] + b"]")
                except msgspec.DecodeError as err:
                    if "truncated" not in str(err):
                        raise
                    after = found[1] + 1
                    size = max(size, 2 * (after - start))
                    continue
                start, after, size = found[1], 0, self.chunk_size
            if start:
                del pending[:start]
            after = max(0, after - start)
        self._final(bytes(pending), consume)

    def _find_start(self) -> bytes:
        buf = b""
        for block in self._blocks:
            buf += block
            match = _KEY.search(buf)
            if match is not None:
                self.head = buf[: match.start()]
                return buf[match.end() :]
            if len(buf) > MAX_HEAD:
                break
        raise NotSplittable("no traceEvents array near the start")

    def _final(self, rest: bytes, consume: Callable[[bytes], None]) -> None:
        """Consume the last events; the decoder itself finds where the array ends (its first trailing byte)."""
        data = b"[" + rest
        try:
            consume(data)
        except msgspec.DecodeError as err:
            match = _TRAILING.search(str(err))
            if match is None:
                raise
            close = data.rfind(b"]", 0, int(match.group(1)) - 1)
        else:
            raise NotSplittable("nothing after the traceEvents array")
        consume(data[: close + 1])
        self.tail = data[close + 1 :]


def _is_boundary(buf: bytes, pos: int, start: int) -> int:
    """Index of the ``}`` before the ``{`` at ``pos`` when only ``,`` and whitespace lie between, else -1."""
    i = pos - 1
    while i > start and buf[i] in _WS:
        i -= 1
    if i <= start or buf[i] != 0x2C:  # ","
        return -1
    i -= 1
    while i > start and buf[i] in _WS:
        i -= 1
    return i if buf[i] == 0x7D else -1  # "}"


def _boundary(buf: bytes, start: int, limit: int, after: int) -> tuple[int, int] | None:
    """(``}`` ending an event, ``{`` starting the next), the ``{`` at or after ``after``: the last before
    ``limit``, else the first from ``limit`` on."""
    pos = limit
    while (pos := buf.rfind(b"{", max(start + 1, after), pos)) > 0:
        end = _is_boundary(buf, pos, start)
        if end >= 0:
            return end, pos
    pos = limit - 1
    while (pos := buf.find(b"{", pos + 1)) > 0:
        end = _is_boundary(buf, pos, start)
        if end >= 0:
            return end, pos
    return None


def metadata(head: bytes, tail: bytes) -> dict[str, Any]:
    """Every top-level key of the document but ``traceEvents``, checking that the array was the top-level one."""
    try:
        doc = orjson.loads(head + b'"traceEvents":' + _SENTINEL_JSON + tail)
    except orjson.JSONDecodeError:
        raise NotSplittable("document around traceEvents is not JSON") from None
    if not isinstance(doc, dict) or doc.get("traceEvents") != _SENTINEL:
        raise NotSplittable("traceEvents is not a top-level key")
    return {key: value for key, value in doc.items() if key != "traceEvents"}
