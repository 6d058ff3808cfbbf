"""Text from traces made safe to show: names and paths in a trace are data, never terminal commands or markup.

:func:`for_terminal` writes control characters (ANSI escape sequences, carriage returns, newlines...) and
bidirectional overrides as visible ``\\xNN`` / ``\\uNNNN`` escapes; :func:`for_html` also escapes HTML's
special characters. Renderers call them on every string that came from a trace.
"""

from __future__ import annotations

import html
import re

#: C0 and C1 controls, DEL, zero-width and bidirectional formatting characters, line separators
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def for_terminal(text: str) -> str:
    """``text`` with every control or formatting character written as a visible escape."""
    return _UNSAFE.sub(_escape, text)


def for_html(text: str) -> str:
    """``text`` for HTML element content or a quoted attribute: ``<>&"'`` escaped, controls made visible."""
    return html.escape(for_terminal(text), quote=True)


def one_line(text: str, limit: int = 500) -> str:
    """``text`` escaped for the terminal (so on one line) and cut to ``limit`` characters."""
    out = for_terminal(text)
    return out if len(out) <= limit else out[: limit - 1] + "…"
