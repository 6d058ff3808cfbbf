"""What one run should not hold twice: a window of a rank in two traces, or a step of a rank recorded twice. Either
means that two runs wrote into one directory under one name (run directories named to the second could be shared)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from lightning_streamprof.results.schema import Result

#: traces named in a warning at most
_NAMED = 3


def repeated(run: str | None, results: Sequence[Result]) -> list[str]:
    """One warning per kind of repeat among the traces of ``run`` that StreamProfiler wrote (their window known;
    steps only where the rank is known); none when every rank's windows and steps are distinct."""
    windows: dict[tuple[int | None, int], list[str]] = defaultdict(list)
    steps: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for r in results:
        ours = [t for t in r.traces if t.window is not None]  # windows of StreamProfiler's runs only
        for t in ours:
            windows[(t.rank, t.window)].append(t.path)
        if len(ours) == 1 and ours[0].rank is not None:  # another tool's traces may number steps per stage
            for s in r.steps.per_step:
                steps[ours[0].rank][s.step] += 1
    name = f"run {run}" if run else "these traces"
    out = []
    twice = {key: paths for key, paths in windows.items() if len(paths) > 1}
    if twice:
        (rank, window), paths = next(iter(sorted(twice.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1]))))
        more = f" (and {len(twice) - 1} more windows)" if len(twice) > 1 else ""
        out.append(f"{name}: window {window} of rank {_rank(rank)} is in {len(paths)} traces ({_paths(paths)}){more};"
                   " two runs wrote into one directory under one name?")
    again = {rank: sorted(n for n, count in counts.items() if count > 1) for rank, counts in steps.items()}
    again = {rank: numbers for rank, numbers in again.items() if numbers}
    if again:
        rank, numbers = min(again.items())
        shown = ", ".join(map(str, numbers[:5])) + (", ..." if len(numbers) > 5 else "")
        out.append(f"{name}: step(s) {shown} of rank {_rank(rank)} recorded more than once; the steps are not"
                   " one run's")
    return out


def _rank(rank: int | None) -> str:
    return "unknown" if rank is None else str(rank)


def _paths(paths: list[str]) -> str:
    return ", ".join(paths[:_NAMED]) + (", ..." if len(paths) > _NAMED else "")
