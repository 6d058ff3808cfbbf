"""What StreamPipeline did, for people (``report()``) and for the Trainer's loggers."""

from __future__ import annotations

from dataclasses import dataclass

from lightning_streamprof.pipeline.auto import AutoSwitch
from lightning_streamprof.pipeline.graph import GraphedForward
from lightning_streamprof.pipeline.program import Program
from lightning_streamprof.pipeline.way import Way


@dataclass
class Facts:
    """What :func:`report` needs to know of a run (the defaults: nothing has run)."""

    mode: str
    cuda: bool = False
    way: Way | None = None  # the fixed way (``mode="on"``/``"off"``), ``None`` under ``auto``
    depth: int = 1
    staged_batches: int = 0
    serial_batches: int = 0
    program: Program | None = None
    misses: dict[str, int] | None = None  # calls of each staged ``module.method`` computed in the step
    not_staged: list[str] | None = None  # frozen calls not staged, each with its reason
    disabled: str | None = None  # why the pipeline trained serially throughout
    auto: AutoSwitch | None = None
    graph_way: str | None = None  # ``mode="on"``: whether the calls replay a CUDA graph, and why not
    eval_batches: int = 0  # validation batches staged ahead
    eval_hits: int = 0  # staged outputs the validation steps used


def report(f: Facts) -> str:
    """A few lines: where batches were staged, what the backbone did, and auto's measurements."""
    if f.disabled:
        return f"StreamPipeline ({f.mode}): trained serially: {f.disabled}"
    where = "CUDA streams" if f.cuda else "no CUDA device: in order, without streams"
    if f.way is not None and f.way.thread:
        where += ", staging thread"
    if f.auto is not None and f.auto.decided:
        where += f"; now {f.auto.choice.label}"
    ahead = f" (up to {f.depth} ahead)" if f.depth > 1 else ""
    lines = [f"StreamPipeline ({f.mode}, {where}): {f.staged_batches} batches staged ahead{ahead},"
             f" {f.serial_batches} fetched serially"]
    if f.eval_batches:
        lines.append(f"  validation: {f.eval_batches} batches staged before their step, {f.eval_hits} staged outputs"
                     " used")
    program = f.program
    if program is not None:
        misses = dict(f.misses or {})
        for call in program.calls:
            made = call.derivations()
            computed = misses.pop(call.label, 0)
            lines.append(f"  staged `{call.label}`" + (f" ({made})" if made else "")
                         + f": {call.hits} staged outputs used, {computed} computed in the step")
            if call.mismatch:
                lines.append(f"    it stopped running ahead: {call.mismatch}")
            elif call.hits == 0 and f.staged_batches > 0:
                lines.append("    no staged output was used: it did not run ahead")
        if program.graph is not None:
            lines.append(_graph_line(program.graph))
            lines += [f"    {note}" for note in program.notes]
        if f.graph_way:
            lines.append(f"  {f.graph_way}")
    for reason in f.not_staged or ():
        lines.append(f"  not staged: {reason}")
    if f.auto is not None:
        lines += _auto_lines(f.auto)
    return "\n".join(lines)


def _graph_line(graphed: GraphedForward) -> str:
    failed = f"; not capturable ({graphed.failure})" if graphed.failure else ""
    return f"  CUDA graph of the staged calls: {graphed.replays} replays, {graphed.eager} eager runs{failed}"


def _auto_lines(auto: AutoSwitch) -> list[str]:
    lines = []
    for r in auto.history:
        against = "over serial" if r.choice.staged else "for the best pipelined way"
        lines.append(f"  trials ({r.reason}, ended at step {r.step}) -> {r.choice.label}"
                     f" ({100 * r.gain:+.1f}% {against})")
        lines += [f"    {v.describe()}" for v in r.verdicts]
        if r.wait_ms > 0:
            lines.append(f"    the loop waited for the loader {r.wait_ms:.3f} ms per step during them")
    for rv in auto.reverts:
        lines.append(f"  steady state: {rv.way.label} {rv.watched_ms:.3f} ms/step over {auto.watch} training steps,"
                     f" over {100 * rv.tolerance:.0f}% slower than in its blocks; serial measurably faster"
                     f" beside it (the way at {1 + rv.gain:.3f}x serial's speed) -> serial from step {rv.step}")
    if auto.history and auto.next_round is not None:
        limit = auto.watch_limit
        sooner = (f"sooner if it runs over {100 * limit:.0f}% slower than in its blocks" if limit is not None
                  else "sooner after a new epoch, dataloader or validation")
        lines.append(f"  next trials at step {auto.next_round} ({sooner})")
    return lines


def decision_metrics(auto: AutoSwitch, gain: float | None = None) -> dict[str, float]:
    """``streampipe/*`` scalars of the current choice; ``gain`` defaults to the last trials'."""
    gain = auto.history[-1].gain if gain is None else gain
    return {"streampipe/pipelined": float(auto.pipelined), "streampipe/gain": gain,
            "streampipe/threaded": float(auto.choice.thread), "streampipe/graphed": float(auto.choice.graph)}
