"""A CPU run's report as a newcomer reads it: no category shown at a measured zero that the run cannot have, no
frozen-module time shown as 0 when the traces cannot tell it, no advice that needs CUDA."""

import re

from tracebuilder import TraceBuilder

from lightning_streamprof.analysis import analyze_table
from lightning_streamprof.report.html import render_report
from lightning_streamprof.results import RunResults, WindowResults

MODULE = "[pl][profile][LightningModule]Model.on_after_batch_transfer"


def _run(frames: bool) -> RunResults:
    """Three 100 µs CPU steps, each with a 30 µs hook and (``frames``) a frozen encoder's module frame."""
    b = TraceBuilder()
    for i in range(3):
        t = i * 100
        b.step(i + 1, t, 100)
        b.annotation(MODULE, t + 1, 30)
        b.op("aten::mm", t + 40, 50)
        if frames:
            b.frame("nn.Module: encoder_0", t + 40, 50)
    result = analyze_table(b.table())
    return RunResults(run="cpu", windows=[WindowResults(window=0, first_step=1, ranks=[result])], merged=result)


def _section(html, anchor):
    return re.search(rf'<section id="{anchor}">(.*?)</section>', html, re.S).group(1)


def test_the_breakdown_table_lists_the_categories_with_time_and_names_the_others():
    table = _section(render_report([_run(False)]), "breakdown")
    rows = re.findall(r'<tr><td class="name">(\w+)</td>', table)
    assert rows and "kernel" not in rows and "memcpy" not in rows and "cpu_exec" in rows
    assert rows == ["cpu_exec", "other"]
    assert "No time in these steps: kernel, memcpy, memset, communication, runtime, dataloader" in table
    assert "(no GPU work in the traces)" in table


def test_frozen_modules_time_is_not_a_measured_zero_without_module_frames():
    without = _section(render_report([_run(False)]), "pipeline")
    assert "frozen modules&#x27; forward" in without or "frozen modules' forward" in without
    assert "n/a" in without and "with_stack=True" in without and "0.000 ms" not in without.split("forward")[1][:80]
    measured = _section(render_report([_run(True)]), "pipeline")
    assert "16.667 ms" not in measured and "0.050 ms" in measured and "encoder_0" in measured


def test_a_run_is_named_by_its_module_and_windows_not_by_its_timestamp_alone():
    import msgspec

    from lightning_streamprof.report.text import render_analysis
    from lightning_streamprof.results import TraceIdentity

    result = _run(False).merged
    traces = [TraceIdentity(path=f"w{w}/rank0.pt.trace.json.gz", run="fit-20261203-1", window=w, first_step=s)
              for w, s in ((0, 12), (1, 26))]
    named = msgspec.structs.replace(result, run="fit-20261203-1", traces=traces)
    assert render_analysis(named).splitlines()[0] == "run fit-20261203-1 (Model; 2 windows from step 12): 2 traces"
