"""A way of running the training loop: serial, or pipelined (on the loop's thread or a staging thread, the
backbone eager or as a CUDA graph)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Way:
    """``staged``: batch N+1 is prepared while N trains; ``thread``: on the staging thread; ``graph``: the
    backbone's staged forward replays a CUDA graph."""

    staged: bool = False
    thread: bool = False
    graph: bool = False

    def __post_init__(self) -> None:
        if (self.thread or self.graph) and not self.staged:
            raise ValueError("Way: only a staged way runs on a thread or with a graph")

    @property
    def key(self) -> str:
        """Short name for logs and JSON: ``serial``, ``inline``, ``thread``, ``inline+graph``, ``thread+graph``."""
        if not self.staged:
            return "serial"
        return ("thread" if self.thread else "inline") + ("+graph" if self.graph else "")

    @property
    def label(self) -> str:
        """What a person reads in a report."""
        if not self.staged:
            return "serial"
        text = "pipelined on a staging thread" if self.thread else "pipelined"
        return text + (", backbone as a CUDA graph" if self.graph else "")

    def __str__(self) -> str:
        return self.key


SERIAL = Way()
INLINE = Way(staged=True)
THREAD = Way(staged=True, thread=True)


def candidate_ways(inline: bool, thread: bool, graph: bool | None) -> list[Way]:
    """The ways ``auto`` tries: serial first, staging on the loop's thread if ``inline``, on the staging thread
    if ``thread``. ``graph`` (a backbone that can be graphed): ``True`` graphs every staged way; ``None`` adds the
    graphed form of the last staged way and drops the eager staging-thread way (a replay does the same work with
    fewer launches, and a first eager forward on a new thread tunes every cuDNN convolution again: cuDNN's
    benchmark cache is per thread); ``False`` none. No graph way without a backbone."""
    staged = ([INLINE] if inline else []) + ([THREAD] if thread else [])
    if graph:
        return [SERIAL, *(Way(True, w.thread, True) for w in staged)]
    if graph is None and staged:
        graphed = Way(True, staged[-1].thread, True)
        staged = [w for w in staged if not w.thread] + [graphed]
    return [SERIAL, *staged]
