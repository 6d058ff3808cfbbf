"""A subclass of Lightning's training data fetcher that keeps the next batch staged.

Lightning fetches batch N (``next(fetcher)``), then runs ``on_before_batch_transfer``, the transfer and
``on_after_batch_transfer`` on it, then the training step. The staging fetcher returns batch N already
prepared (staged while batch N-1 trained) and launches the preparation of batch N+1 before returning, so
it runs on the side stream while batch N trains. ``done`` is recomputed from what was staged.
Private Lightning API: the class of the live fetcher object is swapped (single base; a mixin fails
Python's ``__class__`` layout check).
"""

from __future__ import annotations

from typing import Any

_CLASSES: dict[type, type] = {}


def staging_class(base: type) -> type:
    if getattr(base, "_streamprof_staging", False):
        return base
    if base not in _CLASSES:

        def __iter__(self: Any) -> Any:
            base.__iter__(self)
            self._pipeline.on_epoch_iter(self)
            return self

        def __next__(self: Any) -> Any:
            return self._pipeline.next_batch(self, base.__next__)

        _CLASSES[base] = type(
            f"Staging{base.__name__}", (base,), {"__iter__": __iter__, "__next__": __next__, "_streamprof_staging": True}
        )
    return _CLASSES[base]


def restore_class(fetcher: Any) -> None:
    if getattr(type(fetcher), "_streamprof_staging", False):
        fetcher.__class__ = type(fetcher).__mro__[1]
