"""StreamProfiler's arguments are checked at construction: a wrong type or value is refused with one line naming
the parameter and the value (was: accepted, then failing at the first window or writing to ``./123``), and under
LightningCLI that line ends the command (was a 73-line double traceback)."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from lightning_streamprof import StreamProfiler, WindowSchedule

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("kwargs, error, text", [
    ({"active": 1.5}, TypeError, "`active` must be an integer >= 1, got 1.5 (float)"),
    ({"active": 0}, ValueError, "`active` must be an integer >= 1, got 0"),
    ({"active": True}, TypeError, "`active` must be an integer >= 1, got True (bool)"),
    ({"warmup": -1}, ValueError, "`warmup` must be an integer >= 0, got -1"),
    ({"skip_first": "20"}, TypeError, "`skip_first` must be an integer >= 0, got '20' (str)"),
    ({"every": "abc"}, TypeError, "`every` must be an integer >= 0 or None, got 'abc' (str)"),
    ({"every": -1}, ValueError, "`every` must be an integer >= 0 or None, got -1"),
    ({"repeat": 2.0}, TypeError, "`repeat` must be an integer >= 0, got 2.0 (float)"),
    ({"dirpath": 123}, TypeError, "`dirpath` must be a path or URL (str or os.PathLike) or None, got 123 (int)"),
    ({"dirpath": " "}, ValueError, "`dirpath` must be a path or URL"),
    ({"filename": 5}, TypeError, "`filename` must be a str or None, got 5 (int)"),
    ({"activities": "cpu"}, TypeError, "`activities` must be a list of names out of 'cpu', 'cuda' or None, "
                                       "got 'cpu' (str)"),
    ({"activities": ["cpu", "gpu"]}, ValueError, "`activities` must be a list of names out of 'cpu', 'cuda'"),
    ({"activities": []}, ValueError, "`activities` must be a list of names"),
    ({"row_limit": -1}, ValueError, "`row_limit` must be an integer >= 1, got -1"),
    ({"compress_level": 4}, ValueError, "`compress_level` must be an integer in 0..3, got 4"),
    ({"max_overhead": 1.5}, ValueError, '`max_overhead` must be "auto", a number > 0 and < 1 or None, got 1.5'),
    ({"max_overhead": "2%"}, TypeError, '`max_overhead` must be "auto", a number > 0 and < 1 or None, got \'2%\' (str)'),
    ({"timeout": float("nan")}, ValueError, "`timeout` must be a number > 0, got nan"),
    ({"timeout": 0}, ValueError, "`timeout` must be a number > 0, got 0"),
    ({"gather_timeout": -1.0}, ValueError, "`gather_timeout` must be a number > 0, got -1.0"),
    ({"gather_after": 1.5}, TypeError, "`gather_after` must be an integer >= 0 or None, got 1.5"),
    ({"straggler_threshold": 2}, ValueError, "`straggler_threshold` must be a number >= 0 and <= 1, got 2"),
    ({"with_stack": "false"}, TypeError, "`with_stack` must be True or False, got 'false' (str)"),
    ({"all_threads": 1}, TypeError, "`all_threads` must be True or False or None, got 1 (int)"),
    ({"every": None, "max_overhead": None}, ValueError, "`every=None` places windows by `max_overhead`"),
])
def test_wrong_arguments_are_refused_naming_the_parameter_and_the_value(kwargs, error, text):
    with pytest.raises(error) as raised:
        StreamProfiler(**kwargs)
    message = str(raised.value)
    assert message.startswith("StreamProfiler: ") and text in message and "\n" not in message


def test_right_arguments_of_other_spellings_are_taken(tmp_path):
    prof = StreamProfiler(dirpath=pathlib.Path(tmp_path), active=np.int64(2), activities=("cpu",), max_overhead=1e-2,
                          timeout=5, every=10)
    assert prof.schedule.active == 2 and type(prof.schedule.active) is int
    assert prof.activities == ["cpu"] and prof.timeout == 5.0 and os.fspath(prof.dirpath) == str(tmp_path)


@pytest.mark.parametrize("options, budget", [
    ({}, 0.01), ({"with_flops": True}, 0.01), ({"with_stack": True}, 0.02), ({"profile_memory": True}, 0.02),
    ({"record_shapes": True, "max_overhead": "auto"}, 0.02), ({"with_stack": True, "max_overhead": 0.005}, 0.005),
    ({"with_stack": True, "max_overhead": None, "every": 10}, None),
])
def test_auto_budget_is_1_percent_and_2_with_the_options_that_slow_every_operator(options, budget):
    assert StreamProfiler(**options).max_overhead == budget


def test_window_schedule_names_the_parameter():
    with pytest.raises(TypeError, match=r"WindowSchedule: `every` must be an integer >= 0, got 'abc' \(str\)"):
        WindowSchedule(every="abc")


def test_lightning_cli_error_is_one_line(tmp_path):
    jsonargparse = pytest.importorskip("jsonargparse")
    if not hasattr(jsonargparse, "add_instantiator"):
        pytest.skip("this jsonargparse has no global add_instantiator: the error stays a traceback")
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "train.py"), "fit", "--config",
         os.path.join(ROOT, "examples", "configs", "frozen_backbone.yaml"), "--trainer.max_steps=2",
         "--trainer.profiler=lightning_streamprof.StreamProfiler", "--trainer.profiler.every=-1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "train.py: error: StreamProfiler: `every` must be an integer >= 0 or None, got -1 (int)"]
