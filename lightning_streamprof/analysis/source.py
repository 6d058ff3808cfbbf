"""Operator time by source line: the innermost user-code Python frame around each operator (``with_stack``)."""

from __future__ import annotations

import numpy as np

from lightning_streamprof.analysis._links import group
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.frames import parse_frame
from lightning_streamprof.results import SourceLine, source_lines_of


def source_lines(ctx: TraceContext) -> list[SourceLine]:
    """Every user-code line with operator self time, most host + device self time first (empty without stacks).

    Shares are of all operators' host + device self time."""
    listed = ctx.op_listed
    ops = ctx.ops[listed]
    owner = ctx.user_frame_of(ops)
    hit = owner >= 0
    if not hit.any():
        return []
    host_self, dev_self = ctx.op_host_self[listed], ctx.op_device_self[listed]
    codes, groups = group(ctx.table.name[owner[hit]])
    host = np.bincount(groups, weights=host_self[hit], minlength=codes.size)
    dev = np.bincount(groups, weights=dev_self[hit], minlength=codes.size)
    totals = {}
    for g, code in enumerate(codes.tolist()):
        frame = parse_frame(ctx.table.names[code])
        assert frame is not None
        totals[frame] = (int(host[g]), int(dev[g]))
    return source_lines_of(totals, int(host_self.sum() + dev_self.sum()))
