"""``analyze(path_or_url)``: one trace file, or a directory of them, to typed results (one run at a time)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence

import msgspec

from lightning_streamprof.errors import describe
from lightning_streamprof.results import Result, RunResults, WindowResults, group_runs
from lightning_streamprof.results.repeats import repeated
from lightning_streamprof.trace import remote
from lightning_streamprof.trace.identity import trace_identity
from lightning_streamprof.trace.reader import TraceFormatError, read_trace

#: ``progress(done, total, trace)``: how far :func:`analyze_runs` has read
Progress = Callable[[int, int, str], None]
#: one path or URL, or several of one run (per-host disks, prefixes)
Paths = str | os.PathLike | Sequence[str | os.PathLike]

TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json", ".json.gz")


class SeveralRunsError(ValueError):
    """A path holds the traces of several runs and none was chosen; ``runs`` names them."""

    def __init__(self, path: str, runs: list[str], choose: str = "run=NAME") -> None:
        super().__init__(f"{path}: holds {len(runs)} runs ({', '.join(runs)}); choose one with {choose}")
        self.path = path
        self.runs = runs


def find_traces(path: str, skipped: list[str] | None = None) -> tuple[list[str], str | None]:
    """The traces at ``path`` (itself if a file, else every Kineto trace below it, sorted) and the directory
    they were searched under (None for a file); fsspec URLs work. Remote requests are bounded in time.

    Below a local directory, links to directories are followed, each directory read once (see
    :func:`_walk_local`); ``skipped``, when given, gets a line ``<path>: skipped: <why>`` for each entry left out."""
    traces, root, notes = _search(path)
    if skipped is not None:
        skipped.extend(f"{p}: skipped: {why}" for p, why in notes)
    return traces, root


#: a note of :func:`_search`: an entry left out of a directory's traces, and why
Note = tuple[str, str]


def _search(path: str) -> tuple[list[str], str | None, list[Note]]:
    """:func:`find_traces`, with the entries left out of a local directory's listing (each path, and why)."""
    path = str(path)
    fs, local = remote.filesystem(path)
    info = remote.bounded(fs, path, lambda: fs.info(local), f"looking up {path}")
    if info.get("type") != "directory":
        return [path], None, []
    notes: list[Note] = []
    if remote.is_local(fs):
        every = _walk_local(local.rstrip("/") or "/", notes)
    else:
        every = remote.bounded(fs, path, lambda: fs.find(local), f"listing {path}")
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    prefix = "" if protocol in ("file", "local") else f"{protocol}://"
    found = sorted(p for p in every if p.endswith(TRACE_SUFFIXES[:2]))
    if not found:
        found = sorted(p for p in every if p.endswith(TRACE_SUFFIXES[2:]))
    if not found:
        left_out = "; ".join(f"{p}: {why}" for p, why in notes[:3]) + (
            f"; and {len(notes) - 3} more" if len(notes) > 3 else "")
        raise TraceFormatError(path, "directory holds no Kineto trace (*.pt.trace.json[.gz])"
                               + (f"; left out: {left_out}" if notes else ""))
    root = prefix + local.rstrip("/") if prefix and not local.startswith(prefix) else local.rstrip("/")
    return [prefix + p if prefix and not p.startswith(prefix) else p for p in found], root, notes


def _walk_local(top: str, notes: list[Note]) -> list[str]:
    """Every entry below the local directory ``top`` that is not a directory, named through the links that lead to
    it; a link to a directory is followed, each directory read once. Real directories and files are listed
    before links are followed, so a link to one of them is the name left out. Each entry left out is noted with
    why: a link to a directory that holds it (a loop), a link to a directory or a trace already read, a link to
    nothing, a directory that cannot be listed."""
    seen: dict[tuple[int, int], str] = {}  # (device, inode) of each directory and trace file read -> its name
    every: list[str] = []
    dirs: list[str] = []  # directories to list
    dir_links: list[tuple[str, os.stat_result]] = []  # links to directories, followed once no directory is left
    file_links: list[tuple[str, os.stat_result]] = []  # links to traces, taken once every directory is listed
    try:
        st = os.stat(top)
    except OSError as err:
        raise TraceFormatError(top, describe(err)) from None
    seen[(st.st_dev, st.st_ino)] = top
    dirs.append(top)
    while dirs or dir_links:
        if not dirs:
            link, st = dir_links.pop(0)
            if (st.st_dev, st.st_ino) in seen:
                notes.append((link, _refused_link(link, seen[(st.st_dev, st.st_ino)])))
            else:
                seen[(st.st_dev, st.st_ino)] = link
                dirs.append(link)
            continue
        directory = dirs.pop()
        try:
            with os.scandir(directory) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as err:
            notes.append((directory, f"cannot list it ({describe(err)})"))
            continue
        for entry in listed:
            try:
                if not entry.is_symlink():
                    if entry.is_dir(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        if (st.st_dev, st.st_ino) in seen:  # a bind mount of one already read
                            notes.append((entry.path, f"the directory {seen[(st.st_dev, st.st_ino)]}, already read"))
                        else:
                            seen[(st.st_dev, st.st_ino)] = entry.path
                            dirs.append(entry.path)
                        continue
                    if entry.name.endswith(TRACE_SUFFIXES) and entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        seen.setdefault((st.st_dev, st.st_ino), entry.path)
                    every.append(entry.path)
                    continue
                try:
                    st = os.stat(entry.path)
                except OSError as err:
                    notes.append((entry.path, f"a link to {_target(entry.path)}, which cannot be followed "
                                              f"({describe(err)})"))
                    continue
                if stat.S_ISDIR(st.st_mode):
                    dir_links.append((entry.path, st))
                elif entry.name.endswith(TRACE_SUFFIXES) and stat.S_ISREG(st.st_mode):
                    file_links.append((entry.path, st))
                else:
                    every.append(entry.path)
            except OSError as err:  # the entry went away, or cannot be looked at
                notes.append((entry.path, f"cannot look at it ({describe(err)})"))
    for link, st in file_links:
        first = seen.setdefault((st.st_dev, st.st_ino), link)
        if first == link:
            every.append(link)
        else:
            notes.append((link, f"a link to {_target(link)}, the trace {first}, already read"))
    return every


def _target(link: str) -> str:
    """Where the link ``link`` points, as it is written."""
    try:
        return os.readlink(link)
    except OSError:
        return "?"


def _refused_link(link: str, first: str) -> str:
    """Why a link to the directory already read as ``first`` is not followed: a loop, or a second name."""
    target, here = os.path.realpath(link), os.path.realpath(os.path.dirname(link))
    if here == target or here.startswith(target.rstrip(os.sep) + os.sep):
        return f"a link to {_target(link)}, which holds it: a loop, not followed"
    return f"a link to {_target(link)}, the directory {first}, already read: not followed again"


def analyze_file(path: str, root: str | None = None) -> Result:
    """The result of one trace file, with its identity (run, window, rank, host)."""
    from lightning_streamprof.analysis import analyze_table

    table = read_trace(path)
    return analyze_table(table, trace_identity(path, table.metadata, root))


def as_paths(path: Paths) -> list[str]:
    """``path`` as a list of path strings (one path, or several)."""
    return [str(path)] if isinstance(path, (str, os.PathLike)) else [str(p) for p in path]


def label(path: Paths) -> str:
    """How messages name ``path``: the path, or the paths joined with `` + ``."""
    return " + ".join(as_paths(path))


def _analyze_each(found: list[tuple[str, str | None]],
                  progress: Progress | None = None) -> tuple[list[Result], list[TraceFormatError]]:
    """Every readable trace's result (each ``(trace, root)``), and the errors of the others (a single trace's error
    is raised).

    ``progress(done, total, trace)`` is called before each trace is read (``done`` read so far) and once at the end.
    """
    results, errors = [], []
    for i, (p, root) in enumerate(found):
        if progress is not None:
            progress(i, len(found), p)
        if len(found) == 1:
            results.append(analyze_file(p, root))
            continue
        try:
            results.append(analyze_file(p, root))
        except TraceFormatError as err:
            errors.append(err)
    if progress is not None:
        progress(len(found), len(found), "")
    if not results:
        first = errors[0]
        more = f" (and {len(errors) - 1} more unreadable traces)" if len(errors) > 1 else ""
        raise TraceFormatError(first.source, first.reason + more)
    return results, errors


def _find_all(paths: list[str]) -> tuple[list[tuple[str, str | None]], dict[str, int], list[tuple[Note, str | None]]]:
    """Every trace under each of ``paths`` with the directory it was found under, and which of the paths it was
    found under first; a file found twice (overlapping paths) once. Also each entry left out of a directory's
    listing, with that directory."""
    found: dict[str, str | None] = {}
    first: dict[str, int] = {}
    notes: dict[Note, str | None] = {}
    for i, p in enumerate(paths):
        traces, root, left_out = _search(p)
        for t in traces:
            found.setdefault(t, root)
            first.setdefault(t, i)
        for note in left_out:
            notes.setdefault(note, root)
    return list(found.items()), first, list(notes.items())


def _one_per_rank(results: list[Result], source: dict[str, int]) -> tuple[list[Result], list[str]]:
    """Results with one trace per (run, window, global rank) across the paths given: a rank's window found under
    a second path (a copy on another host's disk) is left out and named. Repeats under one path stay: two runs
    wrote into one directory under one name (:func:`~lightning_streamprof.results.repeats.repeated` names them)."""
    seen: dict[tuple, tuple[int, str]] = {}
    kept, notes = [], []
    for r in results:
        t = r.traces[0]
        key, where = (t.run, t.window, t.rank), source.get(t.path, 0)
        if t.rank is not None and key in seen and seen[key][0] != where:
            notes.append(f"{t.path}: skipped: rank {t.rank} of window {t.window} is already read from {seen[key][1]}")
            continue
        seen.setdefault(key, (where, t.path))
        kept.append(r)
    return kept, notes


def analyze_runs(path: Paths, progress: Progress | None = None) -> list[RunResults]:
    """Every run under ``path`` (one directory, file or URL, or several of one run: each host's disk, prefixes):
    its windows, each window's ranks, and the run's traces merged. The traces of every path are merged by run,
    window and global rank (a rank's window found under two of the paths is read once).

    A trace that cannot be read is left out and named in the ``warnings`` of its run's result (of every run's
    when its run is unknown); so is a window or a step that a rank has twice in one run (two runs written into one
    directory under one name), and an entry of a local directory left out of its listing (a link in a loop, a
    second link to a directory, a dangling link). :class:`TraceFormatError` when no trace can be read.
    ``progress(done, total, trace)`` is called before each trace is read (``done`` read so far) and once at the end.
    """
    from lightning_streamprof.analysis import combine

    found, source, left_out = _find_all(as_paths(path))
    results, errors = _analyze_each(found, progress)
    results, duplicates = _one_per_rank(results, source)
    roots = dict(found)
    runs = []
    for run, windows in group_runs(results).items():
        every = [r for ranks in windows.values() for r in ranks]
        merged = combine(every, run)
        runs.append(RunResults(
            run=run,
            windows=[WindowResults(window=w, first_step=ranks[0].traces[0].first_step, ranks=ranks)
                     for w, ranks in windows.items()],
            merged=merged,
        ))
    names = [r.run or "" for r in runs]
    out = []
    unread = [(e.source, e.reason, roots.get(e.source)) for e in errors]
    unread += [(p, why, root) for (p, why), root in left_out]
    for r in runs:
        skipped = [f"{p}: skipped: {why}" for p, why, root in unread
                   if (owner := trace_identity(p, {}, root).run) == r.run or owner not in names]
        twice = repeated(r.run, [t for w in r.windows for t in w.ranks])
        merged = msgspec.structs.replace(r.merged, runs=names,
                                         warnings=[*r.merged.warnings, *twice, *skipped, *duplicates])
        out.append(msgspec.structs.replace(r, merged=merged))
    return out


def select_run(runs: list[RunResults], run: str | None, path: Paths) -> Result:
    """The merged result of ``run`` (or of the only run); :class:`SeveralRunsError` when a choice is needed."""
    names = [r.run or "" for r in runs]
    if run is None:
        if len(runs) > 1:
            raise SeveralRunsError(label(path), names)
        return runs[0].merged
    for r in runs:
        if r.run == run:
            return r.merged
    raise TraceFormatError(label(path), f"no run named {run!r} (runs: {', '.join(names)})")


def analyze(path: Paths, run: str | None = None) -> Result:
    """Analyse a trace file, or every trace of one run in a directory (local path or fsspec URL), or in several
    directories of one run (a list: each host's disk, or prefixes): merged by run, window and global rank.

    A directory's traces are grouped by run (the profiler's ``<stage>-<time>`` directory, else the directory
    that holds them); the result merges the traces of ``run``, or of the only run (a directory with several
    runs raises :class:`SeveralRunsError` without ``run``; :func:`analyze_runs` gives every run).
    Raises :class:`TraceFormatError` naming the file for anything that is not a readable Kineto trace; in a
    directory, unreadable traces are skipped and named in the result's ``warnings``. Remote stores get
    ``$STREAMPROF_IO_TIMEOUT`` seconds (30) per request.
    """
    return select_run(analyze_runs(path), run, path)
