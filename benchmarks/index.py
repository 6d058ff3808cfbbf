"""What is written from its sources, not by hand: ``python -m benchmarks index`` writes the index of the result
files (``benchmarks/results/INDEX.md``) from the files themselves, and the suites' and workloads' tables of
``benchmarks/README.md`` from ``suites.py`` and ``examples/workloads.py`` (``--check``: exits 1 when one of them is
not what its sources give)."""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

from benchmarks.suites import BY_NAME, HERE, QUESTIONS, RESULTS, SUITES

INDEX = RESULTS / "INDEX.md"
GUIDE = HERE / "README.md"
WORKLOADS = HERE.parent / "examples" / "workloads.py"
SECTIONS = {"suites": lambda: suites_tables(), "workloads": lambda: workloads_table(),
            "figures": lambda: figures_table()}
CODE = re.compile(r"\bcode ([0-9a-f]{7,}[^,;`|)]*)")
COMMAND = re.compile(r"`((?:python|bash|[A-Z_]+=)[^`]*)`")
DATE = re.compile(r"(20\d\d-\d\d-\d\d|20\d{6})")


def _machine(meta: dict) -> str:
    m = meta.get("machine") or {}
    if isinstance(m, dict):
        parts = [m.get("device") or m.get("cpu") or m.get("host"), f"{m['cores']} cores" if m.get("cores") else None]
        m = ", ".join(str(p) for p in parts if p)
    device = meta.get("device")
    if device and str(device) not in str(m):
        m = f"{meta.get('devices', 1)} x {device}" + (f", {m}" if m else "")
    return str(m)


def _from_json(meta: dict) -> dict:
    versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
    ours = versions.get("ours") if isinstance(versions.get("ours"), dict) else {}
    return {"date": str(meta.get("date", ""))[:10], "machine": _machine(meta), "command": meta.get("command", ""),
            "code": meta.get("code") or ours.get("git", "")}


def _from_markdown(text: str) -> dict:
    head = "\n".join(text.splitlines()[:8])
    title = text.splitlines()[0] if text else ""
    inner = title[title.find("(") + 1:title.rfind(")")] if "(" in title else title.partition("—")[2]
    date, command, code = DATE.search(head), COMMAND.search(head), CODE.search(head)
    return {"date": date.group(1) if date else "", "machine": DATE.sub("", inner).strip(" ,"),
            "command": command.group(1) if command else "", "code": code.group(1).strip() if code else ""}


def describe(files: list[Path]) -> dict:
    """The date, machine, command and code version recorded by one result (its files of one name)."""
    found: dict = {}
    for f in sorted(files, key=lambda f: {".json": 0, ".jsonl": 1, ".md": 2}.get(f.suffix, 3)):
        try:
            if f.suffix == ".json":
                data = json.loads(f.read_text())
                info = _from_json(data) if isinstance(data, dict) else {}
            elif f.suffix == ".jsonl":
                info = _from_json(json.loads(f.read_text().split("\n", 1)[0]))
            elif f.suffix == ".md":
                info = _from_markdown(f.read_text())
            else:
                info = {}
        except (ValueError, OSError):
            info = {}
        for k, v in info.items():
            found[k] = found.get(k) or v
    return found


def _cell(text: str) -> str:
    return str(text or "").replace("|", "\\|").replace("\n", " ")


def _results(folder: Path) -> dict[str, list[Path]]:
    by_name: dict[str, list[Path]] = {}
    for f in sorted(p for p in folder.iterdir() if p.is_file()):
        by_name.setdefault(f.name.split(".", 1)[0], []).append(f)
    return by_name


def render() -> str:
    lines = ["# Benchmark results", "",
             "Written by `python -m benchmarks index` from the files (do not edit): each suite's results in",
             "`benchmarks/results/<suite>/`, with the date, machine, command and code version each file records",
             "(`-`: not recorded then). What the runs meant, day by day: [README.md](README.md); the suites: "
             "[../README.md](../README.md).", ""]
    for key, question in QUESTIONS.items():
        lines += [f"## {question}", ""]
        for s in (s for s in SUITES if s.question == key):
            folder = RESULTS / s.name
            if not folder.is_dir():
                continue
            lines += [f"### {s.name}", "", "| result | files | date | machine | command | code |",
                      "| --- | --- | --- | --- | --- | --- |"]
            for name, files in _results(folder).items():
                d = describe(files)
                exts = ", ".join(f"[{f.name[len(name):]}]({s.name}/{f.name})" for f in files)
                lines.append(f"| `{name}` | {exts} | {_cell(d.get('date')) or '-'} | {_cell(d.get('machine')) or '-'} | "
                             f"{'`' + _cell(d['command']) + '`' if d.get('command') else '-'} | "
                             f"{_cell(d.get('code')) or '-'} |")
            lines.append("")
    stray = sorted(p.name for p in RESULTS.iterdir()
                   if p.name not in (INDEX.name, "README.md", ".gitkeep") and p.name not in BY_NAME)
    if stray:
        lines += ["## Not in a suite's folder", "", *(f"- `{n}`" for n in stray), ""]
    return "\n".join(lines)


def suites_tables() -> str:
    """Per question, each suite's command, where it runs and how long, and how to read its result."""
    lines = []
    for key, question in QUESTIONS.items():
        lines += [f"### {question}", "", "| suite | command | where, how long | how to read it |", "| --- | --- | --- | --- |"]
        for s in (s for s in SUITES if s.question == key and s.script):
            lines.append(f"| [{s.name}](results/{s.name}/) | `python -m benchmarks {s.name} {_cell(s.example)}`"
                         f" | {_cell(s.where)} | {_cell(s.reading)} |")
        lines.append("")
    return "\n".join(lines).rstrip()


def workloads_table() -> str:
    """The workloads of ``examples/workloads.py`` (read from its source: no torch)."""
    tree = ast.parse(WORKLOADS.read_text())
    rows = [[ast.literal_eval(a) for a in node.args] for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Workload"]
    lines = ["| workload | shape | what it stands for |", "| --- | --- | --- |"]
    rows = [[_cell(text).replace("``", "`") for text in row] for row in rows]
    return "\n".join(lines + [f"| `{name}` | {shape} | {what} |" for name, shape, what in rows])


def figures_table() -> str:
    """The README's marked figures by result file, with the command recorded in the file."""
    from benchmarks.figures import ROOT, marks

    by_file: dict[str, list[str]] = {}
    for m in marks(ROOT / "README.md"):
        by_file.setdefault(m["file"], []).append(m["figure"])
    lines = ["| result | the README's figures from it | its command |", "| --- | --- | --- |"]
    for file, shown in by_file.items():
        path = RESULTS / file
        command = describe(sorted(path.parent.glob(path.name.split(".", 1)[0] + ".*"))).get("command")
        lines.append(f"| [{file}](results/{file}) | {', '.join(shown)} | "
                     f"{'`' + _cell(command) + '`' if command else '-'} |")
    return "\n".join(lines)


def guide(text: str) -> str:
    """``text`` (benchmarks/README.md) with each ``<!-- NAME -->...<!-- /NAME -->`` section of :data:`SECTIONS`
    written again."""
    for name, make in SECTIONS.items():
        text = re.sub(rf"(<!-- {name} -->\n)(?:.*?\n)?(<!-- /{name} -->)", lambda m: m.group(1) + make() + "\n" + m.group(2),
                      text, flags=re.S)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks index", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the index is not what the files give")
    args = p.parse_args(argv)
    written = {INDEX: render(), GUIDE: guide(GUIDE.read_text())}
    stale = [path for path, text in written.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path} is out of date: python -m benchmarks index", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(written[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
