"""Every row of the faults and bad-input tables (docs/reliability.md) has its test."""

import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "trace"))

from badinput import IGNORED, REJECTED  # noqa: E402


def _section(title):
    text = open(os.path.join(ROOT, "docs", "reliability.md")).read()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _last_cells(section):
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")][1:]
    return [re.findall(r"`([^`]+)`", row.rsplit("|", 2)[1]) for row in rows]


def _test_names(*files):
    names = set()
    for f in files:
        tree = ast.parse(open(os.path.join(ROOT, "tests", f)).read())
        names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    return names


def test_every_fault_row_names_an_existing_test():
    tests = _test_names("faults/test_training_faults.py", "faults/test_deadline.py", "profiling/test_long_run.py",
                        "faults/test_kineto_sessions.py", "faults/test_full_disk.py", "faults/test_runs.py",
                        "pipeline/test_two_pipelines.py", "distributed/test_gather_tree.py", "faults/test_exporter.py",
                        "test_outputs.py", "test_resources.py")
    rows = _last_cells(_section("Faults during training"))
    assert len(rows) >= 14 and all(rows)
    assert [name for row in rows for name in row if name not in tests] == []


def test_every_bad_input_row_is_a_test_case():
    tests = _test_names("trace/test_bad_input.py", "trace/test_odd_files.py", "test_cli_output.py",
                        "profiling/test_settings.py", "test_outputs.py", "trace/test_symlinks.py",
                        "report/test_inert_text.py")
    rows = _last_cells(_section("Bad input"))
    ids = [i for row in rows for i in row]
    assert all(rows) and len(ids) == len(set(ids))
    cases = set(REJECTED) | set(IGNORED)
    assert [i for i in ids if i not in cases and f"test_{i.replace('-', '_')}" not in tests] == []
    assert cases <= set(ids)  # every case built in code is in the table
