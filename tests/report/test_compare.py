"""``streamprof compare``: what changed between two results, as terminal tables and HTML."""

import os
import subprocess
import sys

import pytest
from reports import FIXTURES

from lightning_streamprof.api import analyze
from lightning_streamprof.report.compare import compare, render_compare_html, render_compare_text

A = os.path.join(FIXTURES, "frozen_backbone.pt.trace.json.gz")
B = os.path.join(FIXTURES, "frozen_backbone_bf16.pt.trace.json.gz")


def test_comparison_numbers():
    a, b = analyze(A), analyze(B)
    c = compare(a, b, "fp32", "bf16", top=5)
    (step,) = c.step
    assert (step.a, step.b) == (a.steps.mean_ms, b.steps.mean_ms)
    assert step.delta == pytest.approx(b.steps.mean_ms - a.steps.mean_ms)
    assert step.change == pytest.approx(b.steps.mean_ms / a.steps.mean_ms - 1)
    assert [r.name for r in c.breakdown][:2] == ["kernel", "memcpy"]
    assert {r.name: r.b for r in c.breakdown} == b.steps.breakdown_ms
    top_a = a.kernels[0]
    row = next(r for r in c.kernels if r.name == top_a.name)
    assert row.a == pytest.approx(top_a.total_ns / a.steps.count / 1e6)
    assert 5 <= len(c.kernels) <= 10
    assert any(r.a is None or r.b is None for r in c.kernels)  # kernels found on one side only
    assert c.ranks == []  # one rank each: no per-rank table
    same = compare(a, a)
    assert all(r.delta == 0 for r in same.breakdown + same.kernels)


def test_text_and_html():
    c = compare(analyze(A), analyze(B), "A path", "B path")
    text = render_compare_text(c)
    assert "Step time (ms per step)" in text and "Top kernels (ms per step)" in text and "B - A" in text
    assert "_ns" not in text
    html = render_compare_html(c)
    assert 'id="step-breakdown"' in html and "<rect" in html and "A path" in html


def test_cli_compare(tmp_path):
    out = tmp_path / "compare.html"
    proc = subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", "compare", A, B, "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Step breakdown (ms per step)" in proc.stdout and proc.stdout.strip().endswith(f"Wrote {out}")
    assert out.read_text().startswith("<!DOCTYPE html>")
    bad = subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", "compare", A, str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "no such file" in bad.stderr


def _cpu_result(mm_us):
    from tracebuilder import TraceBuilder

    from lightning_streamprof.analysis import analyze_table

    b = TraceBuilder()
    for i in range(2):
        b.step(i + 1, i * 100, 100)
        b.op("aten::mm", i * 100 + 5, mm_us)
        b.op("aten::add", i * 100 + 60, 10)
    return analyze_table(b.table())


def test_a_cpu_comparison_has_one_breakdown_section_and_the_operators():
    """Two CPU results: the page links the step breakdown once (bars and table in one section) and compares the
    operators' host self time per step, all a CPU run has."""
    c = compare(_cpu_result(20), _cpu_result(40), "before", "after")
    mm = next(r for r in c.operators if r.name == "aten::mm")
    assert (mm.a, mm.b) == (pytest.approx(0.02), pytest.approx(0.04))
    html = render_compare_html(c)
    assert html.count(">Step breakdown<") == 2  # the navigation's link and the section's heading
    assert 'id="top-operators"' in html and "aten::mm" in html and "<svg" in html.split('id="step-breakdown"')[1]
    assert "Top operators (ms of host self time per step)" in render_compare_text(c)
