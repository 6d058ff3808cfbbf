"""The checks of :class:`~lightning_streamprof.StreamProfiler`'s arguments, run at construction: each wrong type
or value is refused with one line naming the parameter and the value (a LightningCLI flag included)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from lightning_streamprof.profiling.arguments import check_bool, check_int, check_names, check_number, check_path

OWNER = "StreamProfiler"
#: activity names ``activities`` may hold
ACTIVITIES = ("cpu", "cuda")
_BOOLS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "analyze")
#: ``max_overhead="auto"``: 1% of the training time, 2% with a recording option that slows every recorded operator
#: (one window of them costs two to three times as much: on an H200 0.29 s against 0.14 s, ``benchmarks/results``)
AUTO_OVERHEAD = 0.01
DETAILED_OVERHEAD = 0.02
DETAILED_OPTIONS = ("record_shapes", "profile_memory", "with_stack")


def _max_overhead(a: SimpleNamespace) -> float | None:
    """``max_overhead`` as a fraction or ``None``; ``"auto"`` by the recording options."""
    if isinstance(a.max_overhead, str) and a.max_overhead == "auto":
        return DETAILED_OVERHEAD if any(getattr(a, name) for name in DETAILED_OPTIONS) else AUTO_OVERHEAD
    return check_number(OWNER, "max_overhead", a.max_overhead, above=0, below=1, optional=True, also='"auto"')


def checked_arguments(given: dict[str, Any]) -> SimpleNamespace:
    """The arguments in ``given`` (the constructor's ``locals()``), checked; numbers as ``int``/``float``."""
    a = SimpleNamespace(**{k: v for k, v in given.items() if k not in ("self", "__class__")})
    check_path(OWNER, "dirpath", a.dirpath)
    if a.filename is not None and not isinstance(a.filename, str):
        raise TypeError(f"{OWNER}: `filename` must be a str or None, got {a.filename!r} ({type(a.filename).__name__})")
    for name, minimum in (("skip_first", 0), ("warmup", 0), ("active", 1), ("repeat", 0)):
        setattr(a, name, check_int(OWNER, name, getattr(a, name), minimum))
    a.every = check_int(OWNER, "every", a.every, 0, optional=True)
    a.gather_after = check_int(OWNER, "gather_after", a.gather_after, 0, optional=True)
    a.compress_level = check_int(OWNER, "compress_level", a.compress_level, 0, 3)  # ISA-L's levels
    a.row_limit = check_int(OWNER, "row_limit", a.row_limit, 1)
    a.straggler_threshold = check_number(OWNER, "straggler_threshold", a.straggler_threshold, at_least=0, at_most=1)
    a.gather_timeout = check_number(OWNER, "gather_timeout", a.gather_timeout, above=0)
    a.timeout = check_number(OWNER, "timeout", a.timeout, above=0)
    for name in _BOOLS:
        check_bool(OWNER, name, getattr(a, name))
    a.max_overhead = _max_overhead(a)
    if a.every is None and a.max_overhead is None:
        raise ValueError(f"{OWNER}: `every=None` places windows by `max_overhead`; give one of them")
    check_bool(OWNER, "all_threads", a.all_threads, optional=True)
    a.activities = check_names(OWNER, "activities", a.activities, ACTIVITIES)
    return a
