"""StreamPipeline's class docstring: its example runs as written, and what it says is logged is what is logged."""

import re
import textwrap

from lightning_streamprof import StreamPipeline
from lightning_streamprof.pipeline import explain
from lightning_streamprof.pipeline.auto import AutoSwitch
from lightning_streamprof.pipeline.decision import Round
from lightning_streamprof.pipeline.paired import Verdict
from lightning_streamprof.pipeline.way import INLINE, SERIAL


def test_the_example_runs(capsys):
    example = textwrap.dedent(StreamPipeline.__doc__.split("Example::", 1)[1])
    exec(compile(example, "StreamPipeline example", "exec"), {"__name__": "streampipeline_example"})
    assert "StreamPipeline (auto, " in capsys.readouterr().out  # its report


def test_the_logged_keys_are_the_documented_ones():
    auto = AutoSwitch((SERIAL, INLINE))
    verdict = Verdict(SERIAL, INLINE, (2.0,) * 6, (2.0, 2.0), "faster", 2.0, 1.0, 130)
    auto.history.append(Round(140, "first", (verdict,), INLINE))
    documented = set(re.findall(r"``(streampipe/\w+)``", StreamPipeline.__doc__))
    assert set(explain.decision_metrics(auto)) == documented
