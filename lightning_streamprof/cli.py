"""The ``streamprof`` command."""

from __future__ import annotations

import argparse
import sys

from lightning_streamprof import __version__


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
        description="Analyse a Kineto trace file, or a directory of them (local path or fsspec URL).",
    )
    analyze.add_argument("path", help="trace file (.json or .json.gz) or directory of traces")
    analyze.add_argument("--json", action="store_true", help="print one JSON object (the documented contract)")
    analyze.add_argument("--top", type=int, default=10, help="rows per table in the text report")
    analyze.add_argument("--run", help="the run to report when the directory holds several (default: each run in "
                                       "the text report; --json needs one)")
    return parser


def _analyze(args: argparse.Namespace) -> int:
    from lightning_streamprof.api import analyze_runs, select_run
    from lightning_streamprof.errors import warn_lines

    runs = analyze_runs(args.path)
    results = [select_run(runs, args.run, args.path)] if args.run or args.json else [r.merged for r in runs]
    warn_lines(list(dict.fromkeys(w for r in results for w in r.warnings)))
    if args.json:
        import msgspec

        from lightning_streamprof.results import to_json

        sys.stdout.buffer.write(msgspec.json.format(to_json(results[0]), indent=2) + b"\n")
    else:
        from lightning_streamprof.report.text import render_analysis

        sys.stdout.write("\n\n".join(render_analysis(r, top=args.top) for r in results) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "analyze":
        from lightning_streamprof.api import SeveralRunsError
        from lightning_streamprof.errors import run_command
        from lightning_streamprof.trace import TraceFormatError

        return run_command(lambda: _analyze(args), (TraceFormatError, SeveralRunsError))
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
