"""Checks of constructor arguments, for any class: the right type and range, or an error naming the parameter and
the value.

A wrong type raises ``TypeError``, a value out of range ``ValueError``; each message is one line,
``<owner>: `<name>` must be <what>, got <value>``. ``bool`` is not taken for a number.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Collection, Sequence
from typing import Any


def _got(value: Any) -> str:
    return f"got {value!r} ({type(value).__name__})"


def _fail(error: type[Exception], owner: str, name: str, what: str, value: Any) -> Exception:
    return error(f"{owner}: `{name}` must be {what}, {_got(value)}")


def check_int(owner: str, name: str, value: Any, minimum: int, maximum: int | None = None, *,
              optional: bool = False) -> int | None:
    """``value`` as an ``int`` in ``minimum..maximum`` (``None`` allowed when ``optional``)."""
    if value is None and optional:
        return None
    bounds = f"in {minimum}..{maximum}" if maximum is not None else f">= {minimum}"
    what = f"an integer {bounds}" + (" or None" if optional else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _fail(TypeError, owner, name, what, value)
    if value < minimum or (maximum is not None and value > maximum):
        raise _fail(ValueError, owner, name, what, value)
    return int(value)


def check_number(owner: str, name: str, value: Any, *, above: float | None = None, at_least: float | None = None,
                 below: float | None = None, at_most: float | None = None, optional: bool = False,
                 also: str | None = None) -> float | None:
    """``value`` as a finite ``float`` within the given bounds (``None`` allowed when ``optional``); ``also`` names
    a value the caller takes besides numbers, for the message."""
    if value is None and optional:
        return None
    bounds = [(sign, test, bound) for sign, test, bound in
              ((">", operator.gt, above), (">=", operator.ge, at_least), ("<", operator.lt, below),
               ("<=", operator.le, at_most)) if bound is not None]
    what = " and ".join([f"a number {bounds[0][0]} {bounds[0][2]:g}" if bounds else "a number",
                         *(f"{sign} {bound:g}" for sign, _, bound in bounds[1:])]) + (" or None" if optional else "")
    what = f"{also}, {what}" if also else what
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(TypeError, owner, name, what, value)
    number = float(value)
    if not math.isfinite(number) or not all(test(number, bound) for _, test, bound in bounds):
        raise _fail(ValueError, owner, name, what, value)
    return number


def check_bool(owner: str, name: str, value: Any, *, optional: bool = False) -> bool | None:
    """``value`` as a ``bool`` (``None`` allowed when ``optional``); a string such as ``"false"`` is refused."""
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        raise _fail(TypeError, owner, name, "True or False" + (" or None" if optional else ""), value)
    return value


def check_path(owner: str, name: str, value: Any, *, optional: bool = True) -> str | os.PathLike | None:
    """``value`` as a path or URL (``str`` or ``os.PathLike``; ``None`` allowed when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and not value.strip()):
        raise _fail(TypeError if not isinstance(value, str) else ValueError, owner, name,
                    "a path or URL (str or os.PathLike)" + (" or None" if optional else ""), value)
    return value


def check_names(owner: str, name: str, value: Any, allowed: Collection[str], *,
                optional: bool = True) -> list[str] | None:
    """``value`` as a non-empty list of names out of ``allowed`` (a sequence, not one string)."""
    if value is None and optional:
        return None
    choices = ", ".join(repr(a) for a in allowed)
    what = f"a list of names out of {choices}" + (" or None" if optional else "")
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise _fail(TypeError, owner, name, what, value)
    if not value or any(not isinstance(v, str) or v not in allowed for v in value):
        raise _fail(ValueError, owner, name, what, value)
    return list(value)
