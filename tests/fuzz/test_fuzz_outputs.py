"""Odd output targets, generated: whatever ``-o`` names (a directory, a FIFO, a socket, a link to any of them, a
dangling link, an input trace, a trace's name in a run being read, ``::`` and trailing slashes in the path), the
command writes one regular file or refuses in one line, and leaves every other entry as it was."""

import contextlib
import os
import socket
import stat
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightning_streamprof import cli

KINDS = ("missing", "file", "dir", "fifo", "socket", "input", "link-file", "link-dir", "link-fifo", "link-input",
         "dangling")
INPUT = "in::put/run/w000-step0000001/rank0.1.pt.trace.json.gz"


def _make(root, kind, name):
    path = os.path.join(root, name)
    if kind == "file":
        with open(path, "w") as f:
            f.write("earlier")
    elif kind == "dir":
        os.mkdir(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path)
        sock.close()
    elif kind.startswith("link-"):
        inner = {"link-file": "file", "link-dir": "dir", "link-fifo": "fifo"}.get(kind)
        if inner:
            _make(root, inner, name + ".real")
            os.symlink(name + ".real", path)
        else:
            os.symlink(os.path.join(root, INPUT), path)
    elif kind == "dangling":
        os.symlink(name + ".nowhere", path)
    return path


def _snapshot(root):
    out = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            st_ = os.lstat(path)
            content = None
            if stat.S_ISREG(st_.st_mode):
                with open(path, "rb") as f:
                    content = f.read()
            out[os.path.relpath(path, root)] = (stat.S_IFMT(st_.st_mode), content)
    return out


COUNTS: dict[str, int] = {}


@settings(max_examples=300, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), name=st.sampled_from(["r.html", "a::b", "x.pt.trace.json.gz", "d"]),
       slash=st.booleans(), inside_input=st.booleans())
def _fuzz(kind, name, slash, inside_input):
    with tempfile.TemporaryDirectory() as root:
        trace = os.path.join(root, INPUT)
        os.makedirs(os.path.dirname(trace))
        with open(trace, "wb") as f:
            f.write(b"the trace")
        where = os.path.dirname(trace) if inside_input else root
        if kind == "input":
            target = trace
        else:
            target = _make(where, kind, name)
        given_path = target + ("/" if slash else "")
        before = _snapshot(root)
        error = None
        try:
            out = cli._output_target(given_path, "default.html", [os.path.join(root, "in::put")])
            cli._write_output(out, "<html></html>")
        except cli.OutputError as err:
            error = str(err)
        after = _snapshot(root)
        assert not [p for p in after if ".tmp-" in p]
        with open(trace, "rb") as f:
            assert f.read() == b"the trace"
        if error is not None:
            assert "\n" not in error and (error.startswith(given_path) or error.startswith(target)), error
            assert after == before
            COUNTS["refused"] = COUNTS.get("refused", 0) + 1
            return
        COUNTS["written"] = COUNTS.get("written", 0) + 1
        assert out is not None
        real = os.path.realpath(out)
        assert stat.S_ISREG(os.stat(real).st_mode)
        with open(real) as f:
            assert f.read() == "<html></html>"
        changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
        written = {os.path.relpath(real, os.path.realpath(root))}
        made = {os.path.relpath(os.path.dirname(real), os.path.realpath(root))} - {"."}
        assert changed <= written | made, (changed, written)
        for p in before:  # no entry changed kind
            with contextlib.suppress(KeyError):
                assert before[p][0] == after[p][0]


def test_an_odd_target_is_written_or_refused_and_nothing_else_changes():
    _fuzz()
    assert COUNTS.get("written", 0) >= 30 and COUNTS.get("refused", 0) >= 30  # both sides are exercised
