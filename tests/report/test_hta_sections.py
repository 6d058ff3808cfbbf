"""HTA's sections in the terminal report, the HTML report, the profiler's summary and TensorBoard's markdown: a
table where the analysis says something, one line or nothing where it has no data, never a missing measure as 0."""

import os
import re

from tracebuilder import TraceBuilder

from lightning_streamprof.analysis import analyze_table
from lightning_streamprof.api import analyze_runs
from lightning_streamprof.report.html import render_report
from lightning_streamprof.report.hta_sections import render_text, sections
from lightning_streamprof.report.markdown import window_markdown
from lightning_streamprof.report.summary import render_windows
from lightning_streamprof.report.text import render_analysis
from lightning_streamprof.trace import read_trace

AMD = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "traces", "hta",
                   "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
STEP = "[pl][profile][Strategy]SingleDeviceStrategy.training_step"


def hooked() -> TraceBuilder:
    """training_step [10, 100) launches K1 (2 ms) and K2 (1 ms); an HtoD pageable copy of 2 MB in 1 ms."""
    b = TraceBuilder()
    b.step(1, 0, 5000)
    b.annotation(STEP, 10, 90)
    b.launch("K1", 20, 200, 2000, 900)
    b.launch("K2", 30, 2300, 1000, 900)
    b.launch("Memcpy HtoD (Pageable -> Device)", 40, 3400, 1000, 900, cat="gpu_memcpy", rt_name="cudaMemcpyAsync",
             bytes=2_000_000)
    return b


def cpu_only() -> TraceBuilder:
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::mm", 10, 50)
    return b


def test_terminal_sections_with_the_hook_table():
    text = render_analysis(analyze_table(hooked().table()))
    assert "GPU time per step by Lightning hook: training_step 3.00 ms (of 3.00 ms of kernels)" in text
    row = next(line for line in text.splitlines() if "training_step (Strategy)" in line)
    assert re.search(r"│\s+1 │\s+0\.09 │\s+3 │", row)  # calls, host ms, GPU ms
    for heading in ("GPU idle time per stream", "Kernel launches", "Launch queue", "Copy bandwidth"):
        assert heading in text
    assert "µs" not in text


def test_no_device_work_no_device_sections():
    """A CPU-only trace: no idle, launch, queue or bandwidth table (nothing shown as 0); the hook section says in
    one line that there are no hook ranges."""
    result = analyze_table(cpu_only().table())
    by = {s.anchor: s for s in sections(result)}
    assert by["idle"].blocks == [] and by["launches"].blocks == [] and by["queue"].blocks == []
    assert by["bandwidth"].blocks == []
    (hooks,) = by["hooks"].blocks
    assert hooks.rows == () and hooks.notes[0].startswith("No Lightning hook ranges")
    text = render_text(result)
    assert "Kernel launches" not in text and "GPU idle time" not in text


def test_html_has_a_section_per_analysis_and_leaves_empty_ones_out(tmp_path):
    path = hooked().write(str(tmp_path / "w.pt.trace.json.gz"))
    html = render_report(analyze_runs(path))
    for anchor in ("hooks", "idle", "launches", "queue", "bandwidth"):
        assert f'<section id="{anchor}">' in html
    assert "training_step (Strategy)" in html
    cpu = render_report(analyze_runs(cpu_only().write(str(tmp_path / "c.pt.trace.json.gz"))))
    assert '<section id="idle">' not in cpu and '<section id="launches">' not in cpu
    assert "No Lightning hook ranges in the traces" in cpu


def test_amd_copies_without_a_size_have_no_bandwidth_and_the_device_is_described():
    """ROCm records no copy size: the GB/s cells are empty (not 0), with a line that says why; the MI250 is
    described, and why its SM efficiency and occupancy are n/a."""
    result = analyze_table(read_trace(AMD))
    (block,) = {s.anchor: s for s in sections(result)}["bandwidth"].blocks
    (copy,) = block.rows
    assert copy.gbps is None
    cells = {header: get(copy) for header, get in block.columns}
    assert cells["GB/s"] is None and cells["MB"] is None and cells["fastest GB/s"] is None
    assert any("record no copy size" in n or "without a recorded size" in n for n in block.notes)
    text = render_analysis(result)
    assert "AMD CDNA2 (gfx90a: MI210/MI250/MI250X): 104 compute units, wavefront 64, 64 KiB LDS per CU, " \
           "matrix cores" in text
    assert "occupancy n/a: ROCm's kernel events carry neither blocks per SM nor occupancy" in text


class _Window:
    def __init__(self, analysis):
        self.window, self.first_step, self.last_step, self.path = 0, 1, 1, "/runs/w0/rank0.pt.trace.json.gz"
        self.analysis, self.pipeline = analysis, None


def test_summary_and_tensorboard_markdown_name_the_hooks():
    result = analyze_table(hooked().table())
    summary = render_windows([_Window(result)])
    assert "GPU time per step by Lightning hook: training_step 3.00 ms (of 3.00 ms of kernels)" in summary
    md = window_markdown(result, 0, 1, 1)
    assert "| hook | calls | host (ms) | GPU (ms) |" in md
    assert "| `training_step (Strategy)` | 1 | 0.090 | 3.000 |" in md


def test_results_written_before_the_hta_analyses_still_render():
    """JSON without ``hta`` (an older ``--json``) decodes with ``hta`` None: no HTA section, no hook sentence."""
    import json

    from lightning_streamprof.results import from_json, to_json

    data = json.loads(to_json(analyze_table(hooked().table())))
    del data["hta"]
    old = from_json(json.dumps(data).encode())
    assert old.hta is None and sections(old) == []
    text = render_analysis(old)
    assert "Lightning hook" not in text and "Kernel launches" not in text
