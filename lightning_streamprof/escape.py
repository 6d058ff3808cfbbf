"""Text from traces made safe to show: names and paths in a trace are data, never terminal commands or markup.

Every renderer escapes each string that came from a trace through this module: :func:`for_terminal` (the
terminal's text and TensorBoard's markdown, which adds its own markdown escapes on top) writes control characters
(ANSI escape sequences, carriage returns, newlines...) and bidirectional overrides as visible ``\\xNN`` /
``\\uNNNN`` escapes; :func:`for_html` (the HTML report and the compare page) makes the same characters visible,
keeps line breaks and tabs (HTML shows them as white space) and escapes HTML's special characters.
"""

from __future__ import annotations

import html
import re

#: C0 and C1 controls, DEL, zero-width and bidirectional formatting characters, line separators
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
#: the same but for tabs and line breaks, which HTML shows as white space
_UNSAFE_IN_HTML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def for_terminal(text: str) -> str:
    """``text`` with every control or formatting character written as a visible escape."""
    return _UNSAFE.sub(_escape, text)


def for_html(text: str) -> str:
    """``text`` for HTML element content or a quoted attribute: ``<>&"'`` escaped, controls made visible."""
    return html.escape(_UNSAFE_IN_HTML.sub(_escape, text), quote=True)


def one_line(text: str, limit: int = 500) -> str:
    """``text`` escaped for the terminal (so on one line) and cut to ``limit`` characters."""
    out = for_terminal(text)
    return out if len(out) <= limit else out[: limit - 1] + "…"
