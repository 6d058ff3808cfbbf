"""The README as a newcomer reads it: a short guide whose fenced commands run as printed (on CPU, in order, in a
fresh folder), whose links lead to files, and whose argument tables name every argument of StreamProfiler and
StreamPipeline with its default."""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys

import pytest

from lightning_streamprof import StreamPipeline, StreamProfiler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
#: a fenced block and the HTML comment just before it: ``run``, ``run: FILE`` (a program saved as FILE),
#: ``not run: why``, ``a fragment`` (Python that is part of a program)
BLOCK = re.compile(r"(?:<!-- (?P<marker>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)


def _text() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def _blocks() -> list[tuple[str | None, str, str]]:
    return [(m["marker"], m["lang"], m["body"]) for m in BLOCK.finditer(_text())]


def test_the_readme_is_a_guide_that_reads_in_one_sitting():
    lines = _text().splitlines()
    assert len(lines) <= 260
    long = [line for line in lines if len(line) > 120 and not line.startswith("|") and not line.startswith("![")]
    assert long == []


def test_every_fenced_block_says_whether_it_runs():
    for marker, lang, body in _blocks():
        assert marker is not None, f"a {lang} block without a marker: {body[:80]!r}"
        if lang == "bash":
            assert marker == "run" or marker.startswith("not run: "), marker
        elif lang == "python":
            assert marker.startswith("run: ") or marker == "a fragment", marker
            ast.parse(body)
        else:
            assert marker.startswith("not run: "), (lang, marker)


def test_every_link_leads_to_a_file():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", _text())
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert local and [t for t in local if not os.path.exists(os.path.join(ROOT, t))] == []


def _table(title: str) -> dict[str, str]:
    text = _text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    rows = [line for line in text[start:end].splitlines() if line.startswith("| `")]
    return {re.match(r"\| `(\w+)`", row).group(1): row.split("|")[2].strip() for row in rows}


@pytest.mark.parametrize("cls, title", [(StreamProfiler, "StreamProfiler's arguments"),
                                        (StreamPipeline, "StreamPipeline's arguments")])
def test_the_argument_tables_name_every_argument_with_its_default(cls, title):
    table = _table(title)
    parameters = {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items() if n != "self"}
    assert list(table) == list(parameters)
    for name, cell in table.items():
        literal = re.fullmatch(r"`([^`]+)`", cell)
        if literal is None:
            continue
        try:
            value = ast.literal_eval(literal.group(1))
        except (ValueError, SyntaxError):
            continue  # a default told in words (a path), not a literal
        assert value == parameters[name], (name, value, parameters[name])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the README's commands are checked on CPU")
def test_the_commands_run_as_printed(tmp_path):
    """Each block marked ``run``, in order: programs saved under their names in a fresh folder, commands run there
    with this environment's ``python`` and ``streamprof`` first on PATH (``./dev`` from the checkout)."""
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    ran = 0
    for marker, lang, body in _blocks():
        if marker.startswith("run: "):
            (tmp_path / marker.split(": ", 1)[1]).write_text(body)
        elif marker == "run":
            cwd = ROOT if "./dev" in body else tmp_path
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=cwd, env=env, capture_output=True,
                                  text=True, timeout=900)
            assert proc.returncode == 0, f"{body}\n{proc.stderr[-3000:]}"
            ran += 1
    assert ran >= 3
    assert list((tmp_path / "runs" / "quickstart" / "lightning_logs").iterdir())
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
