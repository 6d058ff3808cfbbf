"""Files that are not traces at all: the reader opens regular files only (a FIFO, a device or a socket is one line
and exit 2, at once) and bounds what it inflates (a gzip bomb is one line naming the limit, never the machine's
memory). Each case runs the command in a process of its own, bounded in time and memory, as it used to hang or be
killed by the kernel."""

import os
import re
import socket
import subprocess
import sys
import zlib

import pytest

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "traces",
                       "frozen_backbone.pt.trace.json.gz")
MEMORY_LIMIT = 2 << 30  # address space of the command: the bombs below inflate to 2.5 GiB


#: the command under the memory limit, set by the child itself: a ``preexec_fn`` forks the test process, and where
#: an earlier test loaded gRPC (gcsfs's tests) its fork handlers abort the child ("epoll_wait error: Bad file descriptor")
LIMITED = ("import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, ({0}, {0})); "
           "sys.argv[0] = 'streamprof'; runpy.run_module('lightning_streamprof.cli', run_name='__main__')")


def streamprof(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-c", LIMITED.format(MEMORY_LIMIT), "analyze", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def one_error_line(out, path, reason):
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and out.stdout == "", out.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"streamprof: error: {path}: ") and reason in lines[0], lines


def test_fifo(tmp_path):
    fifo = tmp_path / "waiting.pt.trace.json"
    os.mkfifo(fifo)
    one_error_line(streamprof(fifo, timeout=30), fifo, "not a regular file (a FIFO)")  # was: blocked forever


def test_fifo_in_a_directory(tmp_path):
    os.mkfifo(tmp_path / "waiting.pt.trace.json")
    (tmp_path / "good.pt.trace.json.gz").write_bytes(open(FIXTURE, "rb").read())
    out = streamprof(tmp_path, timeout=60)
    assert out.returncode == 0 and "aten::" in out.stdout
    assert out.stderr.strip().splitlines() == [
        f"streamprof: warning: {tmp_path / 'waiting.pt.trace.json'}: skipped: not a regular file (a FIFO)"]


def test_character_device():
    one_error_line(streamprof("/dev/zero"), "/dev/zero", "not a regular file (a character device)")  # was 24 GB


def test_socket(tmp_path):
    path = tmp_path / "s.pt.trace.json"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        one_error_line(streamprof(path), path, "not a regular file (a socket)")
    finally:
        server.close()


def _gzip(data):
    packer = zlib.compressobj(9, wbits=31)
    return packer.compress(data) + packer.flush()


def _bomb(path, head=b""):
    """2.5 GiB of spaces in 2.5 MB: gzip members of 64 MiB each, the first one starting with ``head``."""
    member = _gzip(b" " * (64 << 20))
    with open(path, "wb") as f:
        f.write(_gzip(head + b" " * (64 << 20)))
        for _ in range(39):
            f.write(member)
    return path


@pytest.mark.parametrize("head", [b"", b'{"traceEvents": ['], ids=["spaces", "an-array-of-spaces"])
def test_gzip_bomb(tmp_path, head):
    path = _bomb(tmp_path / "bomb.pt.trace.json.gz", head)
    out = streamprof(path, timeout=60)  # was "internal error: MemoryError" (exit 1), or the kernel's OOM killer
    one_error_line(out, path, "inflates to more than ")
    assert re.search(r"more than 2\d\d\.\d MiB \(100 x its 2\.\d MiB, at least 256\.0 MiB; a gzip bomb\? "
                     r"\$STREAMPROF_MAX_INFLATE sets the factor\)$", out.stderr.strip()), out.stderr


def test_inflate_limit_is_configurable(tmp_path, monkeypatch):
    from lightning_streamprof.api import analyze
    from lightning_streamprof.trace import TraceFormatError
    from lightning_streamprof.trace import limits

    monkeypatch.setattr(limits, "FLOOR", 64 << 10)
    monkeypatch.setenv("STREAMPROF_MAX_INFLATE", "5")  # the fixture inflates about 9 times
    with pytest.raises(TraceFormatError, match=r"more than 247.7 KiB \(5 x its 49.5 KiB, at least 64.0 KiB"):
        analyze(FIXTURE)
    monkeypatch.setenv("STREAMPROF_MAX_INFLATE", "20")
    assert analyze(FIXTURE).steps.count > 0


def test_memory_that_runs_out(monkeypatch, capsys):
    """Within the limits yet more than the machine has: one line, exit 2 (never "internal error: MemoryError")."""
    from lightning_streamprof.cli import main
    from lightning_streamprof.trace import reader

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(reader, "read_chunked", out_of_memory)
    assert main(["analyze", FIXTURE]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"streamprof: error: {FIXTURE}: not enough memory to read it ({os.path.getsize(FIXTURE)} bytes)"]
