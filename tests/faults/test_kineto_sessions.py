"""One Kineto session at a time: a program's own ``torch.profiler`` session, or another StreamProfiler's, is found
before a window starts; the window is then not recorded (one warning says why) and the other session is left
intact. Each case runs in a process of its own: a clash used to end in a segmentation fault."""

import json
import os
import subprocess
import sys
import threading

import pytest
import torch
from traces_on_disk import load_trace, step_numbers

from lightning_streamprof.profiling.session import ExportError, KinetoSession, SessionBusy

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
    # both schedules place a window at the same steps: each of the 6 goes to whichever trainer prepares it first
    # (one of them may win all of them), the other's is refused with a warning
    assert sum(result["windows"]) >= 3
    busy = [w for w in result["warnings"] if "another StreamProfiler is recording in this process" in w]
    assert 1 <= len(busy) <= 2  # at most one per profiler
    # on a loaded machine a window may also be skipped while an earlier trace is still being written, or left
    # unanalysed when the analysis falls behind
    load = ("earlier traces are still being written", "analysis fell behind training")
    assert all(w in busy or any(s in w for s in load) for w in result["warnings"]), result
    spans = []
    for path in result["paths"]:
        trace = load_trace(path)
        steps = step_numbers(trace)
        assert len(steps) == 4 and steps == list(range(steps[0], steps[0] + 4))
        spans.append(_recorded_span(trace))
    spans.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))  # never two at once


def _session():
    return KinetoSession(["cpu"], record_shapes=False, profile_memory=False, with_stack=False, with_flops=False,
                         all_threads=False)


def test_one_session_claims_kineto_until_it_is_saved():
    first = _session()
    with pytest.raises(SessionBusy, match="another StreamProfiler is recording in this process"):
        _session()
    first.start({}, rank=0, world_size=1)
    torch.ones(4).sum()
    path = first.save()
    os.remove(path)
    second = _session()  # free again
    second.release()
    dropped = _session()
    del dropped  # a session dropped without save or release does not keep Kineto claimed
    _session().release()


def test_a_programs_own_session_is_left_untouched(tmp_path):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as theirs:
        with pytest.raises(SessionBusy, match="a torch.profiler session of the program's own is active"):
            _session()
        torch.ones(4).sum()
    theirs.export_chrome_trace(str(tmp_path / "theirs.json"))
    assert any(e.get("name") == "aten::sum" for e in json.loads((tmp_path / "theirs.json").read_text())["traceEvents"])


def test_a_stopped_trace_holds_kineto_until_an_export_thread_has_saved_it():
    first = _session()
    first.start({}, rank=0, world_size=1)
    torch.ones(4).sum()
    stopped = first.stop()
    assert stopped.pending and os.path.getsize(stopped.local) == 0  # made at once, written later
    with pytest.raises(SessionBusy):
        _session()  # no session starts beside Kineto's writer
    saver = threading.Thread(target=stopped.save)
    saver.start()
    saver.join()
    assert not stopped.pending
    with open(stopped.local, "rb") as f:
        assert b"distributedInfo" in f.read()
    os.remove(stopped.local)
    with pytest.raises(ExportError, match="discarded before it was saved"):
        stopped.save()  # once
    _session().release()  # free again


def test_a_discarded_or_dropped_trace_lets_kineto_go_and_leaves_no_file():
    for let_go in ("discard", "drop"):
        session = _session()
        session.start({}, rank=0, world_size=1)
        stopped = session.stop()
        local = stopped.local
        if let_go == "discard":
            stopped.discard()
            stopped.discard()  # once
        del stopped
        assert not os.path.exists(local)
        _session().release()
