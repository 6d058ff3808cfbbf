"""The self-contained HTML report: every section from the results, names escaped, nothing loaded from elsewhere."""

import re
import subprocess
import sys

import msgspec
from reports import DISTRIBUTED, MEMORY_STACK, fixture_run
from tracebuilder import TraceBuilder

from lightning_streamprof.analysis import analyze_table
from lightning_streamprof.report import distributed
from lightning_streamprof.report.html import render_report, source_link
from lightning_streamprof.results import RunResults, WindowResults

SECTIONS = ("overview", "breakdown", "gpu", "kernels", "operators", "memory", "distributed", "recommendations",
            "pipeline", "traces")


def _section(html, anchor):
    match = re.search(rf'<section id="{anchor}">(.*?)</section>', html, re.S)
    assert match, f"no section {anchor}"
    return match.group(1)


def test_every_section_has_the_runs_numbers():
    run = fixture_run(distributed=DISTRIBUTED)
    html = render_report([run], MEMORY_STACK, pipeline={run.run: "StreamPipeline (auto): pipelined, 1.18x"})
    r = run.merged
    assert f"{r.steps.mean_ms:.2f} ms" in _section(html, "overview")
    assert f"{100 * r.gpu[0].utilization:.1f}%" in _section(html, "overview")
    assert "79.5 MiB" in _section(html, "overview")  # peak allocated on GPU0
    assert _section(html, "breakdown").count("<rect") >= 3
    assert "<polyline" in _section(html, "gpu")
    kernels = _section(html, "kernels")
    assert kernels.count("<tr>") >= 11 and "upsample_bilinear2d_backward_out_frame&lt;float" in kernels
    operators = _section(html, "operators")
    assert "aten::cudnn_convolution" in operators and "Hot source lines" in operators
    assert "workloads.py:81" in operators
    assert "<polyline" in _section(html, "memory") and "Memory by operator" in _section(html, "memory")
    dist = _section(html, "distributed")
    assert "rank 1 (straggler)" in dist and "nccl:all_reduce &lt;fused&gt;" in dist
    assert "total (ms)" in dist and ">3.700<" in dist and "total (MiB)" in dist and ">48.000<" in dist
    assert "rank 1 is a straggler: its steps take 40% longer" in dist and "Ranks the others waited for" in dist
    recs = _section(html, "recommendations")
    assert "host_bound" in recs and "stream_pipeline" in recs
    assert "pipelined, 1.18x" in _section(html, "pipeline")
    assert "frozen_backbone_memory_stack.pt.trace.json.gz" in _section(html, "traces")
    assert [s for s in SECTIONS if f'id="{s}"' not in html] == []


def test_self_contained():
    html = render_report([fixture_run()], MEMORY_STACK)
    assert html.startswith("<!DOCTYPE html>")
    for outside in ("<link", "@import", "url(", 'src="http', "src='http", "<img", "<iframe"):
        assert outside not in html
    assert html.count("<script>") == 1 and "<script src" not in html


def test_names_from_a_trace_are_escaped():
    bad_op, bad_kernel = "<script>alert(1)</script>", '<img src=x onerror="alert(2)">'
    b = TraceBuilder()
    b.step(1, 0, 100)
    ext = b.op(bad_op, 5, 50)
    b.launch(bad_kernel, 6, 10, 30, ext, blocks=1.0, occupancy=0.5)
    result = analyze_table(b.table())
    run = RunResults(run="r<1>", windows=[WindowResults(window=0, first_step=1, ranks=[result])], merged=result)
    html = render_report([run], "<source>")
    assert bad_op not in html and bad_kernel not in html and "<source>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "onerror=&quot;alert(2)&quot;" in html


def test_source_lines_link_to_the_editor_when_the_file_exists(tmp_path):
    existing = tmp_path / "train step.py"
    existing.write_text("x = 1\n")
    link = source_link(str(existing), 7)
    assert link.startswith('<a href="vscode://file/') and "train%20step.py:7" in link
    assert source_link("/nowhere/train.py", 7) == "/nowhere/train.py:7"


def test_distributed_view_reads_the_typed_results():
    two = msgspec.structs.replace(DISTRIBUTED, comm_ops=[], waited_for=[], message=None)
    assert [r.rank for r in two.ranks] == [0, 1]
    assert two.stragglers == [1]
    assert distributed.render(fixture_run().merged) == ""  # one rank, no distributed results
    html = distributed.render(fixture_run(distributed=two).merged)
    assert "rank 1 (straggler)" in html and "<rect" in html


def test_several_ranks_without_distributed_results_get_bars_from_their_steps(tmp_path):
    ranks = []
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2)
        b.step(1, 0, 100 + 50 * rank)
        ranks.append(analyze_table(b.table(), msgspec.structs.replace(
            analyze_table(b.table()).traces[0], rank=rank, window=0)))
    from lightning_streamprof.analysis import combine

    merged = combine(ranks, "run")
    html = distributed.render(merged)
    assert "rank 0" in html and "rank 1" in html and "<rect" in html
    assert distributed.render(ranks[0]) == ""  # one rank: no distributed view


def test_cli_report(tmp_path):
    out = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", "report", MEMORY_STACK, "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"Wrote {out}" and proc.stderr == ""
    assert 'id="kernels"' in out.read_text()
    missing = subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", "report", str(tmp_path / "none"),
                              "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "no such file" in missing.stderr
