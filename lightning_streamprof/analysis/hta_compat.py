"""A trace as Holistic Trace Analysis (HTA 0.5.0) sees it, so our numbers can be compared with HTA's on one trace.

HTA changes a trace before any analysis (``hta/common/trace_parser.py``, ``hta/common/trace.py``):

- a trace with fractional microsecond timestamps is rounded, each event's start up and its end down to a whole
  microsecond (its duration is what remains: negative for an event inside one microsecond, which HTA keeps);
- with two or more ``ProfilerStep*`` names in the trace, the last step is dropped: host events (anything that is not
  a device event with a stream and a correlation id) starting at or after the latest start of a ``ProfilerStep*``
  host event (its GPU-side copy included, which HTA counts as a host event) are removed, and so is every device
  event whose correlation id no remaining host event has.

:func:`hta_view` applies both to an :class:`~lightning_streamprof.trace.table.EventTable`; our analyses on the view
see the events HTA's see.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lightning_streamprof.trace.table import COLUMNS, EventTable, Kind

_DEVICE = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


def rounded(table: EventTable, negative: bool = False) -> EventTable:
    """Start rounded up and end down to whole microseconds (``negative``: keep HTA's negative durations).

    As HTA computes it: in float microseconds (the reader's nanoseconds divided back, which gives the trace's floats),
    the end as start + duration in float. A trace whose starts and durations are all whole microseconds (within the
    float error of the reader's conversion) keeps them."""
    ts, dur = table.ts, table.dur
    if ts.size == 0:
        return table
    ts_us = ts / 1000.0
    dur_us = dur / 1000.0
    whole = (np.abs(ts_us - np.rint(ts_us)) <= np.spacing(ts_us)).all() and (dur % 1000 == 0).all()
    if whole:  # snapped to the microseconds the trace has (the reader's ns can be off by its float error)
        return dataclasses.replace(table, ts=np.rint(ts_us).astype(np.int64) * 1000, dur=dur)
    start = np.ceil(ts_us)
    end = np.floor(ts_us + dur_us)
    length = (end - start).astype(np.int64) * 1000
    return dataclasses.replace(table, ts=start.astype(np.int64) * 1000,
                               dur=length if negative else np.maximum(length, 0))


def without_last_step(table: EventTable) -> EventTable:
    """The table less the events HTA leaves out after the last step started (when there are two step names or
    more)."""
    names = np.fromiter((n.startswith("ProfilerStep") for n in table.names), bool, len(table.names))
    step_rows = np.flatnonzero(names[table.name])
    gpu = np.isin(table.kind, _DEVICE) & (table.stream >= 0) & (table.correlation >= 0)
    step_names = np.unique(table.name[step_rows[~gpu[step_rows]]])
    if step_names.size < 2:
        return table
    host_steps = step_rows[~gpu[step_rows]]
    last_start = int(table.ts[host_steps].max())
    host_kept = ~gpu & (table.ts < last_start)
    correlations = np.unique(table.correlation[host_kept & (table.correlation >= 0)])
    keep = host_kept | (gpu & np.isin(table.correlation, correlations))
    return select(table, keep)


def select(table: EventTable, keep: np.ndarray) -> EventTable:
    """The rows of ``table`` where ``keep`` is true (collective arguments renumbered)."""
    rows = np.flatnonzero(keep)
    new_index = np.full(len(table), -1, np.int64)
    new_index[rows] = np.arange(rows.size)
    columns = {name: getattr(table, name)[rows] for name, _, _ in COLUMNS}
    comm = {int(new_index[r]): v for r, v in table.comm_args.items() if keep[r]}
    return dataclasses.replace(table, comm_args=comm, **columns)


def hta_view(table: EventTable, negative: bool = False) -> EventTable:
    """The trace HTA's analyses see: rounded to microseconds, the last step left out (``negative``: durations below
    0 kept, as HTA keeps them; our analyses assume none)."""
    return without_last_step(rounded(table, negative))
