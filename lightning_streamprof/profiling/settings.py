"""StreamProfiler's arguments, checked once at construction, and what they settle: the window schedule, the overhead
budget, the recording options. Each wrong type or value is refused with one line naming the parameter and the value
(a LightningCLI flag included); the checks are :mod:`.argument_checks`', the schedule's bounds :mod:`.schedule`'s."""

from __future__ import annotations

import os
import signal
import warnings
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from lightning_streamprof.profiling.argument_checks import (
    check_bool,
    check_int,
    check_names,
    check_number,
    check_path,
)
from lightning_streamprof.profiling.schedule import MINIMUMS, TAIL_STEPS, WindowSchedule
from lightning_streamprof.profiling.on_demand import signal_number
from lightning_streamprof.profiling.step_watch import FACTOR, MIN_STEPS, WatchSettings

OWNER = "StreamProfiler"
#: activity names ``activities`` may hold
ACTIVITIES = ("cpu", "cuda")
#: the options that slow every recorded operator and enlarge the trace
RECORDING_OPTIONS = ("record_shapes", "profile_memory", "with_stack", "with_flops")
#: ``max_overhead="auto"``: this share of the training time, and :data:`DETAILED_OVERHEAD` with one of
#: :data:`DETAILED_OPTIONS`, whose windows cost two to three times as much (on an H200 0.29 s against 0.14 s,
#: ``benchmarks/results/profiler-overhead/profiler_overhead-h200-overhead-b.md``)
AUTO_OVERHEAD = 0.01
DETAILED_OVERHEAD = 0.02
DETAILED_OPTIONS = ("record_shapes", "profile_memory", "with_stack")
_BOOLS = (*RECORDING_OPTIONS, "analyze", "memory_snapshot", "oom_stacks")
#: signals a request may not take: SLURM's requeue, and those that stop or kill a process
_FORBIDDEN_SIGNALS = {getattr(signal, n) for n in ("SIGUSR1", "SIGKILL", "SIGSTOP", "SIGINT") if hasattr(signal, n)}


@dataclass(frozen=True)
class ProfilerSettings:
    """The checked arguments: numbers as ``int``/``float``, ``max_overhead`` resolved, ``recording`` the options
    given to each window's session."""

    dirpath: str | None
    schedule: WindowSchedule
    max_overhead: float | None
    recording: dict[str, bool]
    activities: list[str] | None
    compress_level: int
    row_limit: int
    analyze: bool
    all_threads: bool | None
    straggler_threshold: float
    gather_after: int | None
    gather_timeout: float
    timeout: float
    watch: WatchSettings | None = None
    #: windows on request: the seconds between looks for the marker (None: no marker, no signal), the signal's number
    request_poll: float | None = None
    request_signal: int | None = None
    #: the CUDA allocator's history with stacks for each window's steps, beside its trace
    memory_snapshot: bool = False
    #: the allocator's light record (live allocations' stacks) over the whole fit, for an out-of-memory report
    oom_stacks: bool = False


def checked_settings(given: dict[str, Any]) -> ProfilerSettings:
    """The settings of the arguments in ``given`` (the constructor's ``locals()``), or the first one's error."""
    a = SimpleNamespace(**{k: v for k, v in given.items() if k not in ("self", "__class__")})
    check_path(OWNER, "dirpath", a.dirpath)
    if a.filename is not None and not isinstance(a.filename, str):
        raise TypeError(f"{OWNER}: `filename` must be a str or None, got {a.filename!r} ({type(a.filename).__name__})")
    for name in ("skip_first", "warmup", "active", "repeat"):
        setattr(a, name, check_int(OWNER, name, getattr(a, name), MINIMUMS[name]))
    a.every = check_int(OWNER, "every", a.every, MINIMUMS["every"], optional=True)
    a.gather_after = check_int(OWNER, "gather_after", a.gather_after, 0, optional=True)
    a.compress_level = check_int(OWNER, "compress_level", a.compress_level, 0, 3)  # ISA-L's levels
    a.row_limit = check_int(OWNER, "row_limit", a.row_limit, 1)
    a.straggler_threshold = check_number(OWNER, "straggler_threshold", a.straggler_threshold, at_least=0, at_most=1)
    a.gather_timeout = check_number(OWNER, "gather_timeout", a.gather_timeout, above=0)
    a.timeout = check_number(OWNER, "timeout", a.timeout, above=0)
    for name in _BOOLS:
        check_bool(OWNER, name, getattr(a, name))
    max_overhead = _max_overhead(a)
    if a.every is None and max_overhead is None:
        raise ValueError(f"{OWNER}: `every=None` places windows by `max_overhead`; give one of them")
    check_bool(OWNER, "all_threads", a.all_threads, optional=True)
    activities = check_names(OWNER, "activities", a.activities, ACTIVITIES)
    if a.all_threads and a.profile_memory:
        warnings.warn("StreamProfiler: `all_threads=True` with `profile_memory=True`: torch records no memory"
                      " event in a session of all threads (pytorch/pytorch#166121), so the windows will have no"
                      " memory view. Leave `all_threads=None` for the memory view.", stacklevel=3)
    grid = a.warmup + a.active + TAIL_STEPS if a.every is None else a.every
    return ProfilerSettings(
        dirpath=os.fspath(a.dirpath) if a.dirpath is not None else None,
        schedule=WindowSchedule(skip_first=a.skip_first, warmup=a.warmup, active=a.active, every=grid,
                                repeat=a.repeat),
        max_overhead=max_overhead, recording={name: getattr(a, name) for name in RECORDING_OPTIONS},
        activities=activities, compress_level=a.compress_level, row_limit=a.row_limit, analyze=a.analyze,
        all_threads=a.all_threads, straggler_threshold=a.straggler_threshold, gather_after=a.gather_after,
        gather_timeout=a.gather_timeout, timeout=a.timeout, watch=_watch(a), **_requests(a),
        memory_snapshot=a.memory_snapshot, oom_stacks=a.oom_stacks)


def _requests(a: SimpleNamespace) -> dict[str, Any]:
    """Windows on request: the marker's poll period and the signal (none with ``on_request=False``)."""
    check_bool(OWNER, "on_request", a.on_request)
    poll = check_number(OWNER, "request_poll", a.request_poll, above=0)
    what = "a signal's name or number (not SIGUSR1, which SLURM sends for requeue) or None"
    if a.request_signal is not None and (isinstance(a.request_signal, bool) or
                                         not isinstance(a.request_signal, (str, int))):
        raise TypeError(f"{OWNER}: `request_signal` must be {what}, got {a.request_signal!r} "
                        f"({type(a.request_signal).__name__})")
    try:
        signum = signal_number(a.request_signal)
    except ValueError:
        signum = -1
    if signum == -1 or (signum is not None and signum in _FORBIDDEN_SIGNALS):
        raise ValueError(f"{OWNER}: `request_signal` must be {what}, got {a.request_signal!r}")
    if not a.on_request:
        return {}
    return {"request_poll": poll, "request_signal": signum}


def _watch(a: SimpleNamespace) -> WatchSettings | None:
    """The step-time watch's settings (None: ``slowdown=False``, no watch)."""
    if a.slowdown is False:
        return None
    factor = FACTOR if a.slowdown is True else check_number(OWNER, "slowdown", a.slowdown, above=1, also="False")
    steps = check_int(OWNER, "slowdown_steps", a.slowdown_steps, MIN_STEPS)
    stall = check_number(OWNER, "stall_factor", a.stall_factor, above=1)
    return WatchSettings(factor=factor, steps=steps, stall_factor=stall)


def _max_overhead(a: SimpleNamespace) -> float | None:
    """``max_overhead`` as a fraction or ``None``; ``"auto"`` by the recording options."""
    if isinstance(a.max_overhead, str) and a.max_overhead == "auto":
        return DETAILED_OVERHEAD if any(getattr(a, name) for name in DETAILED_OPTIONS) else AUTO_OVERHEAD
    return check_number(OWNER, "max_overhead", a.max_overhead, above=0, below=1, optional=True, also='"auto"')
