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
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
