"""The arguments of collective events, kept beside the event table (few events carry them).

PyTorch writes a collective's description on its ``record_param_comms`` operator and, through Kineto, on the
NCCL kernel it launched: ``Collective name``, ``Seq`` (the process group's sequence number), ``Process Group
Name``, ``In msg nelems`` / ``Out msg nelems``, ``dtype`` and ``Group size``. Gloo's work runs on its own
threads as ``gloo:<collective>`` ranges without those keys; their ``Input Dims`` / ``Input type`` (with
``record_shapes``) give the message size.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from lightning_streamprof.names import COMMUNICATION_PREFIXES


class CommArgs(msgspec.Struct, frozen=True, gc=False):
    """What a trace says about one collective event; None where it says nothing."""

    name: str | None = None
    seq: int | None = None
    group: str | None = None
    in_nelems: int | None = None
    out_nelems: int | None = None
    dtype: str | None = None
    group_size: int | None = None


#: argument keys (as PyTorch spells them) -> field
KEYS = {
    "Collective name": "name",
    "Seq": "seq",
    "Process Group Name": "group",
    "In msg nelems": "in_nelems",
    "Out msg nelems": "out_nelems",
    "dtype": "dtype",
    "Group size": "group_size",
}

_GLOO_TYPES = {"float": "Float", "double": "Double", "half": "Half", "c10::Half": "Half", "c10::BFloat16": "BFloat16",
               "int": "Int", "long int": "Long", "long": "Long", "signed char": "Char", "unsigned char": "Byte",
               "bool": "Bool", "short": "Short", "int64_t": "Long"}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None if value is None else str(value)


def from_values(values: dict[str, Any]) -> CommArgs:
    """``CommArgs`` from the decoded values of :data:`KEYS` (wrong types read as unknown)."""
    return CommArgs(
        name=_str(values.get("Collective name")), seq=_int(values.get("Seq")), group=_str(values.get("Process Group Name")),
        in_nelems=_int(values.get("In msg nelems")), out_nelems=_int(values.get("Out msg nelems")),
        dtype=_str(values.get("dtype")), group_size=_int(values.get("Group size")),
    )


def is_gloo_range(name: str) -> bool:
    """Gloo's ``gloo:<collective>`` work ranges (and NCCL's host ``nccl:`` ranges)."""
    return name.startswith(COMMUNICATION_PREFIXES)


def gloo_args(dims: Any, types: Any) -> CommArgs | None:
    """Message size of a ``gloo:`` range from its ``Input Dims`` and ``Input type`` (None without them)."""
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return None
    nelems = 1
    for d in dims[0]:
        if not isinstance(d, int):
            return None
        nelems *= d
    dtype = None
    if isinstance(types, list) and types and isinstance(types[0], str):
        dtype = _GLOO_TYPES.get(types[0], types[0])
    return CommArgs(in_nelems=nelems, out_nelems=nelems, dtype=dtype)


def decode_raw(raw: bytes | memoryview) -> Any:
    """A raw JSON value (None when empty or invalid)."""
    if not raw:
        return None
    try:
        return orjson.loads(bytes(raw))
    except orjson.JSONDecodeError:
        return None
