"""``python -m benchmarks --list`` prints the suites by question; ``python -m benchmarks SUITE [options]`` runs one
(its options: ``python -m benchmarks SUITE --help``); ``gpu``, ``index`` and ``figures`` are the tools around them."""

from __future__ import annotations

import importlib
import os
import sys

from benchmarks.suites import BY_NAME, HERE, QUESTIONS, SUITES

TOOLS = {
    "gpu": "the GPU runner: installs from .whl/, runs the GPU tests and chosen suites within a time limit",
    "index": "writes benchmarks/results/INDEX.md, the index of the result files, from the files",
    "pool": "pools the paired rounds of pipeline-speed results by workload: auto against serial and on",
    "figures": "checks the README's marked figures against their result files (--show prints them)",
}


def listing() -> str:
    lines = []
    for key, question in QUESTIONS.items():
        lines += ["", question]
        for s in (s for s in SUITES if s.question == key and s.script):
            lines.append(f"  {s.name:<24} {s.where}")
            lines.append(f"  {'':<24} python -m benchmarks {s.name} {s.example}".rstrip())
    lines += ["", "Tools"] + [f"  {name:<24} {what}" for name, what in TOOLS.items()]
    return "\n".join(lines[1:])


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\n" + listing())
        return 0 if argv else 2
    if argv[0] == "--list":
        print(listing())
        return 0
    if argv[0] in TOOLS:
        return importlib.import_module(f"benchmarks.{argv[0]}").main(argv[1:])
    suite = BY_NAME.get(argv[0])
    if suite is None or not suite.script:
        print(f"benchmarks: no suite {argv[0]!r}; python -m benchmarks --list prints them", file=sys.stderr)
        return 2
    script = str(HERE / suite.script)
    os.execv(sys.executable, [sys.executable, script, *argv[1:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
