"""Run a notebook's code cells in order and save what they print and show (charts as SVG) as its outputs.

    python notebooks/execute.py notebooks/walkthrough.ipynb

Needs no Jupyter: each cell runs in one shared namespace, in the notebook's folder; a cell's last expression is
its result (``_repr_svg_`` gives a picture). The test suite runs the same cells (tests/test_notebooks.py).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import sys
from typing import Any


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _run(source: str, namespace: dict[str, Any], count: int) -> list[dict[str, Any]]:
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(tree, "<cell>", "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace) if last else None
    outputs: list[dict[str, Any]] = []
    if printed.getvalue():
        outputs.append({"output_type": "stream", "name": "stdout", "text": _lines(printed.getvalue())})
    if value is not None:
        svg = getattr(value, "_repr_svg_", None)
        data = {"text/plain": _lines(f"<{type(value).__name__}>" if svg else repr(value))}
        if svg:
            data["image/svg+xml"] = _lines(svg())
        outputs.append({"output_type": "execute_result", "execution_count": count, "data": data, "metadata": {}})
    return outputs


def execute(path: str) -> None:
    path = os.path.abspath(path)
    with open(path) as f:
        notebook = json.load(f)
    here = os.getcwd()
    os.chdir(os.path.dirname(path))
    try:
        namespace: dict[str, Any] = {}
        count = 0
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code":
                continue
            count += 1
            cell["execution_count"] = count
            cell["outputs"] = _run("".join(cell["source"]), namespace, count)
    finally:
        os.chdir(here)
    with open(path, "w") as f:
        json.dump(notebook, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        execute(name)
