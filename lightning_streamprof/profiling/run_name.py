"""Names of run directories: ``<stage>-<YYYYmmdd-HHMMSS>.<milliseconds>-<6 random hex digits>``.

Runs started in the same second (``trainer.validate`` in a loop, two jobs started together on one ``dirpath``) get
their own directories; the random part keeps two processes apart even within one millisecond.
"""

from __future__ import annotations

import secrets
import time


def new_run_name(stage: str, now: float | None = None) -> str:
    """A fresh run name for ``stage`` at ``now`` (seconds since the epoch; default: the current time)."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stage}-{stamp}.{int(now * 1000) % 1000:03d}-{secrets.token_hex(3)}"
