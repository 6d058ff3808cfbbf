"""The figures of the prose taken from result files: each figure marked in README.md (and other docs) as

    <!-- fig FILE#SELECTOR -->1.038<!-- /fig -->

is compared with the value SELECTOR finds in ``benchmarks/results/FILE``, rounded as the figure is written (a
figure of 3 decimals matches the value to 3 decimals). SELECTOR in a JSON file (``.json``; ``.jsonl``: its lines
as a list) is a path of keys, list indices and ``[key=value]`` picks of the first item with that field, with an
optional factor: ``replay[config=streamprof].replay_us``, ``rows[0].vs_serial.auto*100``. In a Markdown file it
is ``COLUMN@FILTERS[@N]``: the table column whose header starts with COLUMN, the row whose cells match every
``column=value`` of FILTERS (comma-separated), and the N-th number of that cell (0 by default):
``ratio to no profiler@workload=vit:64:bf16-mixed,config=streamprof@1``.

``python -m benchmarks figures`` checks them all (exit 1 on a mismatch), ``--show`` prints each with its value.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from benchmarks.suites import RESULTS

ROOT = RESULTS.parent.parent
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
MARK = re.compile(r"<!-- fig (?P<file>[^#\s]+)#(?P<selector>.+?) -->(?P<figure>.*?)<!-- /fig -->")
NUMBER = re.compile(r"[-+−]?\d[\d,]*(?:\.\d+)?")
STEP = re.compile(r"([^.\[\]]+)|\[([^\]]+)\]")


def number(text: str) -> tuple[float, int]:
    """The first number written in ``text`` and its decimals (thousands' commas and a Unicode minus read)."""
    m = NUMBER.search(text)
    if not m:
        raise ValueError(f"no number in {text!r}")
    digits = m.group().replace(",", "").replace("−", "-")
    return float(digits), len(digits.partition(".")[2])


def from_json(data, selector: str) -> float:
    path, _, factor = selector.partition("*")
    for key, pick in STEP.findall(path):
        if key:
            data = data[int(key)] if isinstance(data, list) else data[key]
        elif "=" in pick:
            field, value = pick.split("=", 1)
            data = next(item for item in data if str(item.get(field)) == value)
        else:
            data = data[int(pick)]
    return float(data) * (float(factor) if factor else 1.0)


def _cells(line: str) -> list[str]:
    return [c.strip().strip("`") for c in line.strip().strip("|").split("|")]


def from_markdown(text: str, selector: str) -> float:
    column, _, rest = selector.partition("@")
    filters, _, index = rest.partition("@")
    wanted = dict(f.split("=", 1) for f in filters.split(",") if f)
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if not (line.startswith("|") and lines[i + 1].startswith("| ---")):
            continue
        header = _cells(line)
        col = next((j for j, h in enumerate(header) if h.startswith(column)), None)
        if col is None or not all(k in header for k in wanted):
            continue
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            cells = _cells(row)
            if all(cells[header.index(k)] == v for k, v in wanted.items()):
                return float(NUMBER.findall(cells[col])[int(index or 0)].replace(",", "").replace("−", "-"))
    raise LookupError(f"no table cell {selector!r}")


def value(file: str, selector: str) -> float:
    path = RESULTS / file
    text = path.read_text()
    if path.suffix == ".json":
        return from_json(json.loads(text), selector)
    if path.suffix == ".jsonl":
        return from_json([json.loads(line) for line in text.splitlines() if line.strip()], selector)
    return from_markdown(text, selector)


def marks(doc: Path) -> list[dict]:
    """Every marked figure of ``doc``: its line, file, selector and text."""
    name = str(doc.relative_to(ROOT)) if doc.is_relative_to(ROOT) else str(doc)
    text = doc.read_text()
    return [{"doc": name, "line": text.count("\n", 0, m.start()) + 1, **m.groupdict()} for m in MARK.finditer(text)]


def check(docs: tuple[Path, ...] = DOCS) -> tuple[list[dict], list[str]]:
    """The marked figures of ``docs`` and the problems: a figure that its file's value, rounded as the figure is
    written, does not give, or a file or selector that finds nothing."""
    found, problems = [], []
    for doc in docs:
        for m in marks(doc) if doc.exists() else []:
            where = f"{m['doc']}:{m['line']}: {m['figure']!r} ({m['file']}#{m['selector']})"
            try:
                shown, decimals = number(m["figure"])
                m["value"] = value(m["file"], m["selector"])
            except (OSError, ValueError, LookupError, KeyError, IndexError, TypeError, StopIteration) as e:
                problems.append(f"{where}: {type(e).__name__}: {e}")
                continue
            if abs(m["value"] - shown) > 0.5 * 10 ** -decimals + 1e-9:
                problems.append(f"{where}: the file gives {m['value']:.{decimals + 2}f}")
            found.append(m)
    return found, problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks figures", description=__doc__.splitlines()[0])
    p.add_argument("--show", action="store_true", help="print each figure with its file's value")
    args = p.parse_args(argv)
    found, problems = check()
    if args.show:
        for m in found:
            print(f"{m['doc']}:{m['line']}: {m['figure']} <- {m['value']:g} ({m['file']}#{m['selector']})")
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(found)} figures, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
