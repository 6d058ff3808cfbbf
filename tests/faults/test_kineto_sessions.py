"""One Kineto session at a time: a program's own ``torch.profiler`` session, or another StreamProfiler's, is found
before a window starts; the window is then not recorded (one warning says why) and the other session is left
intact. Each case runs in a process of its own: a clash used to end in a segmentation fault."""

import json
import os
import subprocess
import sys

from traces_on_disk import load_trace, step_numbers

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "session_program.py")


def run_program(mode, directory):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, PROGRAM, mode, str(directory)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"  # was 139 (SIGSEGV)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_torch_profiler_session_of_the_programs_own(tmp_path):
    result = run_program("user", tmp_path)
    assert result["windows"] == 0
    assert len(result["warnings"]) == 1
    assert "not recorded: a torch.profiler session of the program's own is active" in result["warnings"][0]
    assert result["user_range"]  # the user's session exported whole, with its own range
    assert not result["our_steps_in_user_trace"]  # nothing of ours entered it


def _recorded_span(trace):
    steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"]
    return min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)


def test_two_trainers_in_two_threads(tmp_path):
    result = run_program("threads", tmp_path)
    assert result["errors"] == []
    assert all(n >= 1 for n in result["windows"])
    assert 1 <= len(result["warnings"]) <= 2  # at most one per profiler
    assert all("another StreamProfiler is recording in this process" in w for w in result["warnings"])
    spans = []
    for path in result["paths"]:
        trace = load_trace(path)
        steps = step_numbers(trace)
        assert len(steps) == 4 and steps == list(range(steps[0], steps[0] + 4))
        spans.append(_recorded_span(trace))
    spans.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))  # never two at once
