"""Problems met off the training thread, collected for the training thread to warn about.

The first problem of each kind is warned about; later ones of that kind are only counted (a dead store over
400 windows is one warning and a count in the summary, not 400 warnings).
"""

from __future__ import annotations

import threading


class Problems:
    """Thread-safe: background threads :meth:`add`, the training thread :meth:`drain` and reads :meth:`lines`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._new: list[str] = []
        self.counts: dict[str, int] = {}
        self._last: dict[str, str] = {}

    def add(self, kind: str, message: str) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self._last[kind] = message
            if self.counts[kind] == 1:
                self._new.append(message)

    @property
    def pending(self) -> bool:
        """Whether :meth:`drain` has messages."""
        return bool(self._new)

    def drain(self) -> list[str]:
        """Messages not handed out yet (the first of each kind)."""
        with self._lock:
            new, self._new = self._new, []
        return new

    def lines(self) -> list[str]:
        """One line per kind: its count and latest message."""
        with self._lock:
            return [f"{n} x {self._last[kind]}" if n > 1 else self._last[kind] for kind, n in self.counts.items()]
