"""Work that StreamPipeline could stage ahead: the ``on_after_batch_transfer`` hook and frozen modules' forwards."""

from __future__ import annotations

import re

from lightning_streamprof import names
from lightning_streamprof.analysis.context import TraceContext
from lightning_streamprof.analysis.host import time_inside
from lightning_streamprof.results import PipelineWork
from lightning_streamprof.trace.table import Kind

_HOOK = re.compile(r"^" + re.escape(names.LIGHTNING_MODULE_RANGE) + r".*\.on_after_batch_transfer$")
_FROZEN = re.compile(r"backbone|frozen|encoder", re.IGNORECASE)


def _is_pipeline_range(name: str) -> bool:
    return name.startswith(names.PIPELINE_RANGE)


def pipeline_work(ctx: TraceContext) -> PipelineWork:
    """Time of the hook and of frozen-looking modules' forwards inside the steps (summed over the steps)."""
    steps = ctx.steps
    if not steps:
        return PipelineWork()
    t = ctx.table
    lo, hi = ctx.step_spans
    host = ctx.host_ranges
    hooks = host[ctx.mask(host, _HOOK.match)]
    modules = {m.group(1) for n in t.names if (m := names.LIGHTNING_MODULE_CLASS.match(n))}

    def is_frozen(name: str) -> bool:
        module = name.split("nn.Module: ", 1)[-1].rsplit("_", 1)[0] if "nn.Module:" in name else None
        return module is not None and module not in modules and bool(_FROZEN.search(module))

    frames = t.select(Kind.USER_ANNOTATION, Kind.PYTHON_FUNCTION)
    frozen = frames[ctx.mask(frames, is_frozen)]
    module_frames = bool(ctx.mask(frames, lambda name: "nn.Module:" in name).any())
    return PipelineWork(
        steps=len(steps),
        hook_ns=time_inside(ctx, hooks, lo, hi),
        hook_names=sorted({ctx.name_of(r) for r in hooks.tolist()}),
        frozen_ns=time_inside(ctx, frozen, lo, hi),
        frozen_names=sorted({ctx.name_of(r) for r in frozen.tolist()}),
        pipelined=bool(ctx.flags(_is_pipeline_range).any()),
        module_frames=module_frames,
    )
