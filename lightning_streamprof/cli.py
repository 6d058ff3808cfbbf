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
    return parser


def _analyze(args: argparse.Namespace) -> int:
    import orjson

    from lightning_streamprof.api import analyze
    from lightning_streamprof.trace import TraceFormatError

    try:
        result = analyze(args.path)
    except TraceFormatError as err:
        print(f"streamprof: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        from lightning_streamprof.report.text import render_analysis

        sys.stdout.write(render_analysis(result, top=args.top) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "analyze":
        return _analyze(args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
