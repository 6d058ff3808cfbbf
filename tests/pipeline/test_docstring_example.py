"""StreamPipeline's class docstring: its example runs as written, and what it says is logged is what is logged."""

import re
import textwrap

from lightning_streamprof import StreamPipeline
from lightning_streamprof.pipeline import explain
from lightning_streamprof.pipeline.auto import AutoSwitch
from lightning_streamprof.pipeline.decision import Measurement
from lightning_streamprof.pipeline.way import INLINE, SERIAL


def test_the_example_runs(capsys):
    example = textwrap.dedent(StreamPipeline.__doc__.split("Example::", 1)[1])
    exec(compile(example, "StreamPipeline example", "exec"), {"__name__": "streampipeline_example"})
    assert "StreamPipeline (auto, " in capsys.readouterr().out  # its report


def test_the_logged_keys_are_the_documented_ones():
    auto = AutoSwitch((SERIAL, INLINE))
    auto.history.append(Measurement({SERIAL: 2.0, INLINE: 1.0}, INLINE))
    documented = set(re.findall(r"``(streampipe/\w+)``", StreamPipeline.__doc__))
    assert set(explain.decision_metrics(auto)) == documented
