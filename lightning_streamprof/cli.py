"""The ``streamprof`` command."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable

from lightning_streamprof import __version__

#: the files that ``report`` and ``compare`` write by default, or into a directory given as ``-o``
REPORT_NAME = "streamprof-report.html"
COMPARE_NAME = "streamprof-compare.html"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamprof",
        description="Profile PyTorch Lightning training in sampled Kineto windows and explain the traces.",
        epilog="Profiling needs no command: Trainer(profiler='streamprof') or --trainer.profiler=streamprof.",
    )
    parser.add_argument("--version", action="version", version=f"streamprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    analyze = sub.add_parser(
        "analyze",
        help="GPU metrics, step breakdown, kernels, operators, memory and recommendations of traces",
        description="Analyse a Kineto trace file, or a directory of them (local path or fsspec URL). Several paths "
                    "of one run (each host's disk, or prefixes) are merged by run, window and global rank.",
    )
    analyze.add_argument("path", nargs="+", metavar="PATH",
                         help="trace file (.json or .json.gz) or directory of traces; several: one run's traces "
                              "from each host")
    analyze.add_argument("--json", action="store_true", help="print one JSON object (the documented contract)")
    analyze.add_argument("--top", type=_at_least_one, default=10, help="rows per table in the text report")
    analyze.add_argument("--run", help="the run to report when the directory holds several (default: each run in "
                                       "the text report; --json needs one)")
    _add_report(sub)
    _add_compare(sub)
    record = sub.add_parser(
        "record",
        help="ask a running job for a profiling window now (a marker file its rank 0 looks for)",
        description="Write the marker that asks a running StreamProfiler for a window: in its dirpath or in one of "
                    "its run directories (local path or fsspec URL). Global rank 0 looks for it every request_poll "
                    "seconds (5) and every 100 steps, whichever is rarer, records a window at once and removes the "
                    "marker; the report says the window was recorded on request.",
    )
    record.add_argument("run_dir", metavar="RUN_DIR", help="the profiler's dirpath, or a run directory under it")
    return parser


def _add_report(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser(
        "report",
        help="one self-contained HTML file: charts and tables of the traces, recommendations",
        description="Write one self-contained HTML report (works offline) of a trace, a window or a run "
                    "(local path or fsspec URL); several paths of one run (each host's disk, or prefixes) are "
                    "merged by run, window and global rank.",
    )
    report.add_argument("path", nargs="+", metavar="PATH",
                        help="trace file or directory of traces (a run, a window, or a directory of runs); several: "
                             "one run's traces from each host")
    report.add_argument("-o", "--output", default=REPORT_NAME,
                        help="the HTML file to write (default: %(default)s; a directory: that name in it; - for "
                             "standard output; an fsspec URL works)")
    report.add_argument("--run", help="only this run of a directory that holds several (default: every run)")


def _add_compare(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser(
        "compare",
        help="what changed between two runs, windows or traces: step time, breakdown, kernels, memory, ranks",
        description="Compare B against A: each is a trace file or a directory (a run or a window), local or URL. "
                    "With A alone (a run): each window the profiler recorded because the run slowed down, against the "
                    "last normal window before it.",
    )
    compare.add_argument("a", help="the baseline: trace file or directory (alone: a run with a slowdown's window)")
    compare.add_argument("b", nargs="?", help="the one to compare with the baseline")
    compare.add_argument("--with-a", action="append", default=[], metavar="PATH",
                         help="another directory or URL of A's run (another host's disk); repeatable")
    compare.add_argument("--with-b", action="append", default=[], metavar="PATH",
                         help="another directory or URL of B's run (another host's disk); repeatable")
    compare.add_argument("--run-a", help="the run of A, when A holds several")
    compare.add_argument("--run-b", help="the run of B, when B holds several")
    compare.add_argument("--top", type=_at_least_one, default=10,
                         help="kernels of each side to compare (default: %(default)s)")
    compare.add_argument("-o", "--output", help="also write the comparison as a self-contained HTML file (a "
                                                "directory: %s in it; - for standard output, alone)" % COMPARE_NAME)


def _analyze(args: argparse.Namespace) -> int:
    from lightning_streamprof.api import select_run

    runs = _read_runs(args.path)
    results = [select_run(runs, args.run, args.path)] if args.run or args.json else [r.merged for r in runs]
    _warn(results)
    if args.json:
        import msgspec

        from lightning_streamprof.results import to_json

        _print(msgspec.json.format(to_json(results[0]), indent=2) + b"\n")
    else:
        from lightning_streamprof.report.text import render_analysis

        windows = {r.run: r.windows for r in runs}
        _print("\n\n".join(render_analysis(r, top=args.top, windows=windows.get(r.run, ())) for r in results)
               + "\n")
    return 0


def _read_runs(path: list[str]) -> list:
    """Every run under the paths (merged), with a progress bar on a terminal for a remote URL or many traces."""
    from lightning_streamprof.api import analyze_runs
    from lightning_streamprof.report.progress import reading

    with reading(path) as progress:
        return analyze_runs(path, progress=progress)


class OutputError(ValueError):
    """The output file of a command cannot be written (its message names the file and the reason)."""


def _output_target(path: str, default_name: str, inputs: list[str]) -> str | None:
    """The file that ``-o path`` writes, checked before any trace is read (see
    :func:`lightning_streamprof.output.output_file`: a directory gets ``default_name`` in it; an input or a trace's
    name in a run being read is refused); None for standard output (``-``, ``/dev/stdout``)."""
    from lightning_streamprof.api import TRACE_SUFFIXES
    from lightning_streamprof.errors import describe
    from lightning_streamprof.output import OutputRefused, is_stdout, output_file

    if is_stdout(path):
        return None
    try:
        return output_file(path, default_name, inputs, lambda name: name.endswith(TRACE_SUFFIXES))
    except OutputRefused as err:
        raise OutputError(str(err)) from None
    except (OSError, ImportError, ValueError) as err:
        raise OutputError(f"{path}: cannot write: {describe(err)}") from None


def _write_output(target: str | None, text: str) -> None:
    """Write ``text`` to ``target`` (None: standard output) through a temporary name, so that an earlier file
    survives a failed write and none is left cut off or empty; a directory, device, FIFO or socket is never
    replaced (:func:`lightning_streamprof.output.write_atomic`)."""
    from lightning_streamprof.errors import describe
    from lightning_streamprof.output import write_atomic

    if target is None:
        _print(text)
        return
    try:
        write_atomic(target, text.encode("utf-8"), make_parents=False)
    except (OSError, ImportError, ValueError) as err:
        raise OutputError(f"{target}: cannot write: {describe(err)}") from None
    _print(f"Wrote {target}\n")


def _print(text: str | bytes) -> None:
    """Write ``text`` to stdout now; a write that fails (``> /dev/full``, a full disk) is an :class:`OutputError`.
    A closed pipe is left to :func:`~lightning_streamprof.errors.run_command`."""
    from lightning_streamprof.errors import describe

    try:
        if isinstance(text, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(text)
        else:
            sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as err:
        _discard_stdout()
        raise OutputError(f"<stdout>: cannot write: {describe(err)}") from None


def _discard_stdout() -> None:
    """Send what stdout still buffers to the null device, so that its flush at exit cannot fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _at_least_one(text: str) -> int:
    """``--top``: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _report(args: argparse.Namespace) -> int:
    from lightning_streamprof.analysis.memory_snapshot import beside_traces, read_snapshots
    from lightning_streamprof.report.html import render_report
    from lightning_streamprof.trace.beside import read_pipeline_notes
    from lightning_streamprof.trace import TraceFormatError

    from lightning_streamprof.api import label

    target = _output_target(args.output, REPORT_NAME, args.path)
    runs = _read_runs(args.path)
    if args.run is not None:
        runs = [r for r in runs if r.run == args.run]
        if not runs:
            raise TraceFormatError(label(args.path), f"no run named {args.run!r}")
    pipeline, problems = read_pipeline_notes(runs)
    snapshots, unread = read_snapshots(beside_traces(t for r in runs for t in r.merged.traces))
    _warn([r.merged for r in runs], [*problems, *unread])
    html = render_report(runs, label(args.path), pipeline=pipeline, snapshots=snapshots)
    _write_output(target, html)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from lightning_streamprof.api import select_run
    from lightning_streamprof.report.compare import compare, render_compare_html, render_compare_text

    side_a, side_b = [args.a, *args.with_a], [args.b, *args.with_b] if args.b is not None else []
    target = _output_target(args.output, COMPARE_NAME, [*side_a, *side_b]) if args.output else None
    if args.b is None:
        return _compare_slowdowns(args, side_a, target)
    a = select_run(_read_runs(side_a), args.run_a, side_a)
    b = select_run(_read_runs(side_b), args.run_b, side_b)
    _warn([a, b])
    comparison = compare(a, b, _label(side_a, args.run_a), _label(side_b, args.run_b), top=args.top)
    _print_comparison(args, target, render_compare_text(comparison), render_compare_html(comparison))
    return 0


def _print_comparison(args: argparse.Namespace, target: str | None, text: str, html: str) -> None:
    if not (args.output and target is None):  # with -o -, the HTML alone goes to standard output
        _print(text + "\n")
    if args.output:
        _write_output(target, html)


def _compare_slowdowns(args: argparse.Namespace, side: list[str], target: str | None) -> int:
    """``compare RUN``: each slowdown's window against the last normal window before it."""
    from lightning_streamprof.api import SeveralRunsError, label
    from lightning_streamprof.report.compare import compare_slowdowns
    from lightning_streamprof.trace import TraceFormatError

    runs = _read_runs(side)
    if args.run_a is not None:
        runs = [r for r in runs if r.run == args.run_a]
    if len(runs) > 1:
        raise SeveralRunsError(label(side), [r.run or "" for r in runs])
    _warn([r.merged for r in runs])
    found = compare_slowdowns(runs[0].windows, top=args.top) if runs else None
    if found is None:
        raise TraceFormatError(label(side), "no window of the run was recorded for a slowdown after a normal window;"
                                            " give B to compare two results")
    _print_comparison(args, target, *found)
    return 0


def _record(args: argparse.Namespace) -> int:
    """``record RUN_DIR``: the marker that asks the running job for a window."""
    from lightning_streamprof.errors import describe
    from lightning_streamprof.profiling.on_demand import write_marker

    try:
        path = write_marker(args.run_dir)
    except (OSError, ImportError, ValueError) as err:
        raise OutputError(f"{args.run_dir}: cannot write the marker: {describe(err)}") from None
    _print(f"Wrote {path}: the job records a window once its rank 0 finds it (within request_poll seconds and "
           "100 steps).\n")
    return 0


def _warn(results: list, more: list[str] = ()) -> None:
    """The warnings of ``results`` (skipped traces, ignored values) and ``more``, each once, one line each on
    stderr."""
    from lightning_streamprof.errors import warn_lines

    warn_lines(list(dict.fromkeys([*(w for r in results for w in r.warnings), *more])))


def _run(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``command(args)`` with one-line errors: bad input (a trace, a run, an output that cannot be written) exits
    2, Ctrl+C 130, anything else 1 (see :func:`lightning_streamprof.errors.run_command`)."""
    from lightning_streamprof.api import SeveralRunsError
    from lightning_streamprof.errors import run_command
    from lightning_streamprof.trace import TraceFormatError

    def call() -> int:
        try:
            return command(args)
        except SeveralRunsError as err:  # said in the command line's words
            raise SeveralRunsError(err.path, err.runs, "--run NAME") from None

    return run_command(call, (TraceFormatError, SeveralRunsError, OutputError))


def _label(paths: list[str], run: str | None) -> str:
    from lightning_streamprof.api import label

    return f"{label(paths)} (run {run})" if run else label(paths)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "analyze":
        return _run(_analyze, args)
    if args.command == "report":
        return _run(_report, args)
    if args.command == "compare":
        return _run(_compare, args)
    if args.command == "record":
        return _run(_record, args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
