"""What the command writes: files through a temporary name (an earlier report survives a failed write; no file is
left cut off or empty), stdout that cannot be written is one line and exit 2, and ``--top`` below 1 is refused."""

import errno
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "faults"))

from faultkit import fault_store, fill, small_fs  # noqa: E402, F401

from lightning_streamprof.cli import main  # noqa: E402

TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "traces",
                     "frozen_backbone.pt.trace.json.gz")
EARLIER = "<html>the earlier report</html>"


def streamprof(*args, stdout=subprocess.PIPE):
    return subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=300)


def one_error_line(stderr, text):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamprof: error: ") and text in lines[0], stderr


@pytest.mark.parametrize("command", ["report", "compare"])
def test_report_on_a_full_disk_keeps_the_earlier_one(tmp_path, small_fs, command):
    disk = small_fs("disk", 64)
    target = disk / "r.html"
    target.write_text(EARLIER)
    fill(disk)
    args = ["report", TRACE] if command == "report" else ["compare", TRACE, TRACE]
    done = streamprof(*args, "-o", str(target))
    assert done.returncode == 2
    one_error_line(done.stderr, f"{target}: cannot write: No space left on device")
    assert target.read_text() == EARLIER  # was replaced by a cut-off file
    assert sorted(os.listdir(disk)) == ["filler", "r.html"]  # no temporary file left


def test_report_write_that_fails_simulated(fault_store, capsys):
    fault_store.failure = OSError(errno.ENOSPC, "No space left on device")
    target = "faultmem://bucket/r.html"
    fs = fault_store()
    fs.pipe_file("/bucket/r.html", EARLIER.encode())
    fault_store.writes_allowed = 0  # every later write fails, leaving an empty object as a full disk does
    assert main(["report", TRACE, "-o", target]) == 2
    one_error_line(capsys.readouterr().err, f"{target}: cannot write: No space left on device")
    assert fs.cat("/bucket/r.html") == EARLIER.encode()
    assert [k for k in fault_store.store if ".tmp-" in k] == []


@pytest.mark.parametrize("args", [["analyze", TRACE], ["analyze", TRACE, "--json"], ["compare", TRACE, TRACE],
                                  ["report", TRACE, "-o", os.devnull]], ids=["analyze", "json", "compare", "report"])
def test_stdout_that_cannot_be_written(args):
    with open("/dev/full", "w") as full:
        done = streamprof(*args, stdout=full)
    assert done.returncode == 2  # was 1, "internal error"
    one_error_line(done.stderr, "<stdout>: cannot write: No space left on device")


@pytest.mark.parametrize("args", [["analyze", TRACE, "--top", "-1"], ["compare", TRACE, TRACE, "--top", "0"],
                                  ["analyze", TRACE, "--top", "many"]])
def test_top_below_one(args, capsys):
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert f"error: argument --top: must be an integer >= 1, got {args[-1]!r}" in capsys.readouterr().err
