"""One analysis context per trace: the indices every analysis shares, each built once on first use.

Every analysis is a function of a :class:`TraceContext`: the event table plus the operator nesting, the
operators and runtime calls that launched each device event, the user-code frames, the steps and the
training thread.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from lightning_streamprof import names
from lightning_streamprof.analysis._links import Nesting, lookup, thread_keys
from lightning_streamprof.analysis.frames import is_user_frame
from lightning_streamprof.trace.table import EventTable, Kind

if TYPE_CHECKING:
    from lightning_streamprof.analysis.steps import Step

DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
LAUNCH_KINDS = (Kind.RUNTIME, Kind.DRIVER)


class TraceContext:
    """An event table and its shared indices (rows are indices into the table's columns)."""

    def __init__(self, table: EventTable) -> None:
        self.table = table
        self._flags: dict[Callable[[str], object], np.ndarray] = {}

    # ------------------------------------------------------------------ names
    def flags(self, predicate: Callable[[str], object]) -> np.ndarray:
        """``predicate(name)`` for every distinct name (evaluated once per predicate)."""
        out = self._flags.get(predicate)
        if out is None:
            names_ = self.table.names
            out = self._flags[predicate] = np.fromiter((bool(predicate(n)) for n in names_), bool, len(names_))
        return out

    def mask(self, rows: np.ndarray, predicate: Callable[[str], object]) -> np.ndarray:
        """``predicate(name)`` of each of ``rows``."""
        return self.flags(predicate)[self.table.name[rows]] if rows.size else np.zeros(0, bool)

    def name_of(self, row: int) -> str:
        return self.table.names[self.table.name[row]]

    def ends(self, rows: np.ndarray) -> np.ndarray:
        return self.table.ts[rows] + self.table.dur[rows]

    # ------------------------------------------------------------------ rows by kind
    @cached_property
    def kernels(self) -> np.ndarray:
        return self.table.select(Kind.KERNEL)

    @cached_property
    def device_rows(self) -> np.ndarray:
        """Kernels, copies and memsets."""
        return self.table.select(*DEVICE_KINDS)

    @cached_property
    def runtime(self) -> np.ndarray:
        """CUDA runtime and driver calls."""
        return self.table.select(*LAUNCH_KINDS)

    @cached_property
    def ops(self) -> np.ndarray:
        """CPU operator rows (every ``cpu_op`` range: the operator nesting's nodes)."""
        return self.table.select(Kind.CPU_OP)

    @cached_property
    def host_ranges(self) -> np.ndarray:
        """CPU operators and host-side ``record_function`` ranges."""
        return self.table.select(Kind.CPU_OP, Kind.USER_ANNOTATION)

    # ------------------------------------------------------------------ links
    @cached_property
    def device_launch(self) -> np.ndarray:
        """For each of :attr:`device_rows`, the runtime/driver row that launched it (by correlation), or -1."""
        t = self.table
        return lookup(t.correlation[self.runtime], self.runtime, t.correlation[self.device_rows])

    def launching_ops(self, rows: np.ndarray) -> np.ndarray:
        """For each of ``rows`` (device events or runtime calls), the operator row with its External id, or -1."""
        t = self.table
        return lookup(t.external_id[self.ops], self.ops, t.external_id[rows])

    @cached_property
    def device_owner(self) -> np.ndarray:
        """For each of :attr:`device_rows`, the operator row that launched it, or -1."""
        return self.launching_ops(self.device_rows)

    @cached_property
    def kernel_owner(self) -> np.ndarray:
        """For each of :attr:`kernels`, the operator row that launched it, or -1."""
        return self.device_owner[self.table.kind[self.device_rows] == Kind.KERNEL]

    def thread_keys(self, rows: np.ndarray) -> np.ndarray:
        return thread_keys(self.table, rows)

    # ------------------------------------------------------------------ operator nesting
    @cached_property
    def op_nesting(self) -> Nesting:
        """Per-thread nesting of :attr:`ops`."""
        starts = self.table.ts[self.ops]
        return Nesting(starts, starts + self.table.dur[self.ops], self.thread_keys(self.ops))

    def _per_op(self, rows: np.ndarray, owners: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = np.zeros(self.ops.size, np.int64)
        hit = owners >= 0
        if hit.any():
            np.add.at(out, np.searchsorted(self.ops, owners[hit]), values[hit])
        return out

    @cached_property
    def op_host_self(self) -> np.ndarray:
        """Per operator: its duration less its child operators' and its own CUDA runtime calls' (torch's self
        time, as torch-tb-profiler computes it)."""
        runtime_ns = self._per_op(self.runtime, self.launching_ops(self.runtime), self.table.dur[self.runtime])
        return np.maximum(self.op_nesting.self_lengths() - runtime_ns, 0)  # calls outside their operator: 0

    @cached_property
    def op_device_self(self) -> np.ndarray:
        """Per operator: time of the device work it launched itself."""
        return self._per_op(self.device_rows, self.device_owner, self.table.dur[self.device_rows])

    @cached_property
    def op_listed(self) -> np.ndarray:
        """Which :attr:`ops` are operators in the operator view (not steps, data loading or optimizer ranges)."""
        return self.mask(self.ops, names.is_operator)

    # ------------------------------------------------------------------ user frames
    @cached_property
    def user_frames(self) -> np.ndarray:
        """``python_function`` rows of user code (``with_stack`` traces), leaving out the frames that only start
        the run: a frame that encloses a whole step on its thread (the script's ``trainer.fit(...)`` or
        ``LightningCLI(...)`` line) runs the training loop, so what Lightning does inside the step is not that
        line's; the step's own user code (``training_step``, hooks) is inside the step and stays."""
        frames = self.table.select(Kind.PYTHON_FUNCTION)
        frames = frames[self.mask(frames, is_user_frame)]
        return frames[~self._encloses_a_step(frames)]

    def _encloses_a_step(self, rows: np.ndarray) -> np.ndarray:
        """Whether each of ``rows`` starts at or before some step's start and ends at or after its end, on the
        step's thread."""
        out = np.zeros(rows.size, bool)
        steps = self.step_marks
        if rows.size == 0 or steps.size == 0:
            return out
        t = self.table
        step_threads, row_threads = self.thread_keys(steps), self.thread_keys(rows)
        for thread in np.unique(step_threads):
            mine = steps[step_threads == thread]
            order = np.argsort(t.ts[mine], kind="stable")
            starts, ends = t.ts[mine][order], (t.ts[mine] + t.dur[mine])[order]
            # the shortest-ending step that starts at or after each frame's start is the one it could enclose
            min_end_after = np.minimum.accumulate(ends[::-1])[::-1]
            on = np.flatnonzero(row_threads == thread)
            first = np.searchsorted(starts, t.ts[rows[on]], side="left")
            has = first < starts.size
            frame_end = t.ts[rows[on]] + t.dur[rows[on]]
            out[on[has]] = min_end_after[first[has]] <= frame_end[has]
        return out

    @cached_property
    def _user_nesting(self) -> Nesting:
        starts = self.table.ts[self.user_frames]
        return Nesting(starts, starts + self.table.dur[self.user_frames], self.thread_keys(self.user_frames))

    def user_frame_of(self, rows: np.ndarray) -> np.ndarray:
        """For each of ``rows``, the innermost user frame row around it on its thread, or -1."""
        if self.user_frames.size == 0 or rows.size == 0:
            return np.full(rows.size, -1, np.int64)
        inner = self._user_nesting.enclosing(self.table.ts[rows], self.thread_keys(rows))
        return np.where(inner >= 0, self.user_frames[inner], -1)

    # ------------------------------------------------------------------ steps
    @cached_property
    def steps(self) -> tuple[Step, ...]:
        """The steps, in time order (:func:`lightning_streamprof.analysis.steps.find_steps`)."""
        from lightning_streamprof.analysis.steps import find_steps

        return find_steps(self)

    @cached_property
    def step_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Each step's start and end, device work included."""
        return (np.array([s.start_ns for s in self.steps], np.int64),
                np.array([s.end_ns for s in self.steps], np.int64))

    @cached_property
    def host_step_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Each step's host start and end."""
        return (np.array([s.host_start_ns for s in self.steps], np.int64),
                np.array([s.host_end_ns for s in self.steps], np.int64))

    @cached_property
    def step_marks(self) -> np.ndarray:
        """The host-side ``ProfilerStep#N`` rows."""
        return self.host_ranges[self.mask(self.host_ranges, names.is_step)]

    def on_training_thread(self, rows: np.ndarray) -> np.ndarray:
        """The ``rows`` on the thread(s) that ran the training steps."""
        threads = np.unique(self.thread_keys(self.step_marks))
        return rows[np.isin(self.thread_keys(rows), threads)]
