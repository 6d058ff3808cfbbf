"""What the tool writes never destroys what was there: ``-o`` onto a directory, an input, a device, a FIFO, a socket,
standard output or a link; local paths with ``::``; the files read beside the traces bounded as traces are."""

import os
import shutil
import socket
import stat
import subprocess
import sys
import threading

import pytest

from lightning_streamprof import locations, output
from lightning_streamprof.cli import main

TRACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "traces",
                     "frozen_backbone.pt.trace.json.gz")
WINDOW = "w000-step0000010"
TRACE_NAME = "rank0.1010.pt.trace.json.gz"


@pytest.fixture
def runs(tmp_path):
    """A folder of one run laid out as the profiler lays it out: ``runs/fit-a/w000-step0000010/rank0….gz``."""
    window = tmp_path / "runs" / "fit-a" / WINDOW
    window.mkdir(parents=True)
    shutil.copy(TRACE, window / TRACE_NAME)
    return tmp_path / "runs"


def streamprof(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", *args], capture_output=True,
                          cwd=cwd, timeout=timeout)


def one_error(err, text):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamprof: error: ") and text in lines[0], err


def files_under(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


# ------------------------------------------------------------------------------------------------ directories
@pytest.mark.parametrize("target", [".", "out/", "out"])
def test_report_into_a_directory_writes_the_default_name_in_it(tmp_path, monkeypatch, capsys, target):
    monkeypatch.chdir(tmp_path)
    if target == "out":
        (tmp_path / "out").mkdir()
    assert main(["report", TRACE, "-o", target]) == 0
    written = os.path.join(target, "streamprof-report.html")
    assert capsys.readouterr().out == f"Wrote {written}\n"
    assert (tmp_path / written).read_text().startswith("<!DOCTYPE html>")
    assert not [f for f in files_under(tmp_path) if ".tmp-" in f]


def test_compare_into_a_directory(tmp_path, capsys):
    assert main(["compare", TRACE, TRACE, "-o", str(tmp_path)]) == 0
    assert capsys.readouterr().out.endswith(f"Wrote {tmp_path / 'streamprof-compare.html'}\n")
    assert os.listdir(tmp_path) == ["streamprof-compare.html"]


def test_report_into_the_run_it_reads_leaves_its_traces_alone(runs, capsys):
    run = runs / "fit-a"
    assert main(["report", str(run), "-o", str(run)]) == 0
    assert files_under(run) == sorted([os.path.join(WINDOW, TRACE_NAME), "streamprof-report.html"])
    capsys.readouterr()
    assert main(["analyze", str(run), "--json"]) == 0  # the report is not read as a trace
    assert '"path": "' + str(run / WINDOW / TRACE_NAME) in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ inputs
def test_an_input_trace_is_never_replaced(runs, capsys):
    trace = runs / "fit-a" / WINDOW / TRACE_NAME
    before = trace.read_bytes()
    for args in (["report", str(trace)], ["report", str(runs)], ["compare", TRACE, str(trace)]):
        assert main([*args, "-o", str(trace)]) == 2
        one_error(capsys.readouterr().err, f"{trace}: is one of the inputs")
    assert trace.read_bytes() == before and files_under(runs) == [os.path.join("fit-a", WINDOW, TRACE_NAME)]


def test_a_new_trace_name_inside_a_run_being_read_is_refused(runs, capsys):
    target = runs / "fit-a" / WINDOW / "rank1.1011.pt.trace.json.gz"
    assert main(["report", str(runs), "-o", str(target)]) == 2
    one_error(capsys.readouterr().err, "under a trace's name; refused")
    assert not target.exists()


def test_an_input_through_a_link_is_recognised(runs, tmp_path, capsys):
    trace = runs / "fit-a" / WINDOW / TRACE_NAME
    (tmp_path / "alias.gz").symlink_to(trace)
    before = trace.read_bytes()
    assert main(["report", str(trace), "-o", str(tmp_path / "alias.gz")]) == 2
    one_error(capsys.readouterr().err, "is one of the inputs")
    assert trace.read_bytes() == before


# ------------------------------------------------------------------------------------------------ special files
def _fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _socket(tmp_path):
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    return path


def _device(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    path = tmp_path / "null-copy"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


@pytest.mark.parametrize("make, kind", [(_fifo, "a FIFO"), (_socket, "a socket"), (_device, "a character device")])
@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_fifo_socket_or_device_is_refused_and_stays(tmp_path, capsys, make, kind, command):
    target = make(tmp_path)
    mode = os.lstat(target).st_mode
    args = ["report", TRACE] if command == "report" else ["compare", TRACE, TRACE]
    assert main([*args, "-o", str(target)]) == 2
    one_error(capsys.readouterr().err, f"{target}: not a regular file ({kind}); refused")
    assert os.lstat(target).st_mode == mode and os.listdir(tmp_path) == [target.name]


def test_a_fifo_with_a_reader_waiting_is_not_replaced(tmp_path):
    fifo = _fifo(tmp_path)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    done = streamprof("report", TRACE, "-o", str(fifo))
    assert done.returncode == 2 and b"a FIFO" in done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with open(fifo, "wb"):  # let the reader go
        pass
    reader.join(10)
    assert got == [b""]


def test_the_null_device_takes_the_report_and_stays_a_device():
    before = os.stat(os.devnull)
    done = streamprof("report", TRACE, "-o", os.devnull)
    assert done.returncode == 0 and done.stdout == f"Wrote {os.devnull}\n".encode(), done.stderr
    after = os.stat(os.devnull)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_standard_output_gets_the_html_alone(target):
    if target != "-" and not os.path.exists(target):
        pytest.skip(f"no {target}")
    for args in (["report", TRACE], ["compare", TRACE, TRACE]):
        done = streamprof(*args, "-o", target)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(b"<!DOCTYPE html>") and done.stdout.rstrip().endswith(b"</html>")
    assert os.path.islink("/dev/stdout") or target == "-"


def test_a_link_is_written_through(tmp_path, capsys):
    real = tmp_path / "real.html"
    real.write_text("earlier")
    real.chmod(0o640)
    link = tmp_path / "link.html"
    link.symlink_to(real.name)
    assert main(["report", TRACE, "-o", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.read_text().startswith("<!DOCTYPE html>") and stat.S_IMODE(real.stat().st_mode) == 0o640
    dangling = tmp_path / "dangling.html"
    dangling.symlink_to("made.html")
    assert main(["report", TRACE, "-o", str(dangling)]) == 0
    assert dangling.is_symlink() and (tmp_path / "made.html").read_text().startswith("<!DOCTYPE html>")
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f]


def test_a_failed_rename_leaves_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "r.html"
    target.write_text("earlier")

    def fails(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(output.os, "replace", fails)
    with pytest.raises(OSError):
        output.write_atomic(str(target), b"new")
    assert os.listdir(tmp_path) == ["r.html"] and target.read_text() == "earlier"


def test_a_directory_target_is_refused_by_the_writer(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(output.NotRegularFile, match="a directory"):
        output.write_atomic(str(tmp_path / "d"), b"x")
    assert os.listdir(tmp_path / "d") == []


# ------------------------------------------------------------------------------------------------ paths with ::
@pytest.mark.parametrize("path, url", [
    ("s3://bucket/a", True), ("memory://x", True), ("simplecache::s3://bucket/a", True), ("file:///tmp/a", True),
    ("/tmp/a::b", False), ("a::b", False), ("a::b/c", False), ("relative/x", False), ("C:/x", False),
])
def test_a_url_names_its_protocol(path, url):
    assert locations.is_url(path) is url


def test_a_local_path_with_colons_is_a_path(tmp_path):
    fs, local = locations.filesystem(str(tmp_path / "a::b"))
    assert locations.is_local(fs) and local == str(tmp_path / "a::b")
    assert locations.local_path("file://" + str(tmp_path / "a::b")) == str(tmp_path / "a::b")
    assert locations.local_path("memory://x") is None


def test_commands_read_and_write_local_paths_with_colons(tmp_path, capsys):
    folder = tmp_path / "colons::x"
    folder.mkdir()
    shutil.copy(TRACE, folder)
    assert main(["analyze", str(folder)]) == 0
    assert str(folder / os.path.basename(TRACE)) in capsys.readouterr().out
    assert main(["report", str(folder), "-o", str(folder / "r::1.html")]) == 0
    assert sorted(os.listdir(folder)) == [os.path.basename(TRACE), "r::1.html"]
    assert os.listdir(tmp_path) == ["colons::x"]


# ------------------------------------------------------------------------------------------------ files beside
def _notes(runs, make):
    path = runs / "fit-a" / "streampipeline.txt"
    make(path)
    return path


@pytest.mark.parametrize("make, reason", [
    (lambda p: os.mkfifo(p), "not a regular file (a FIFO)"),
    (lambda p: p.symlink_to("/dev/zero"), "not a regular file (a character device)"),
    (lambda p: p.write_bytes(b"ok \xff\xfe"), "not UTF-8 text (byte 3)"),
    (lambda p: p.write_bytes(b"x" * ((1 << 20) + 1)), "larger than 1,048,576 bytes (1,048,577 bytes)"),
], ids=["fifo", "dev-zero", "not-utf8", "too-large"])
def test_pipeline_notes_are_read_as_a_trace_is(runs, tmp_path, make, reason):
    notes = _notes(runs, make)
    done = streamprof("report", str(runs), "-o", str(tmp_path / "r.html"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().strip().splitlines() == [
        f"streamprof: warning: StreamPipeline's report left out: {notes}: {reason}"]
    assert (tmp_path / "r.html").exists()


def test_pipeline_notes_are_shown(runs, tmp_path, capsys):
    _notes(runs, lambda p: p.write_text("StreamPipeline: 38 batches staged ahead\n"))
    assert main(["report", str(runs), "-o", str(tmp_path / "r.html")]) == 0
    assert "38 batches staged ahead" in (tmp_path / "r.html").read_text()


# ------------------------------------------------------------------------------------------------ the profiler
def test_a_dirpath_with_colons_holds_every_file(tmp_path):
    from helpers import fit

    from lightning_streamprof import StreamProfiler

    base = tmp_path / "a::b"
    prof = StreamProfiler(dirpath=str(base), skip_first=2, warmup=1, active=2, every=8, max_overhead=None,
                          filename="summary")
    fit(prof, tmp_path, max_steps=12)
    assert os.listdir(tmp_path) == ["a::b"]  # was a/ with a.tmp-… files in it
    assert prof.windows and all(os.path.isfile(w.path) for w in prof.windows)
    (run,) = [d for d in os.listdir(base) if (base / d).is_dir()]
    assert "report.html" in os.listdir(base / run)
    assert "StreamProfiler:" in (base / "fit-summary.txt").read_text()
    assert f"analyze {base / run}" in prof.summary()


def test_the_summary_file_is_appended_to_and_never_a_fifo(tmp_path):
    from helpers import fit

    from lightning_streamprof import StreamProfiler

    summary = tmp_path / "fit-s.txt"
    summary.write_text("earlier\n")
    fit(StreamProfiler(dirpath=str(tmp_path), filename="s", skip_first=1, active=2, every=4, max_overhead=None), tmp_path, max_steps=6)
    text = summary.read_text()
    assert text.startswith("earlier\nStreamProfiler:") and not [f for f in os.listdir(tmp_path) if ".tmp-" in f]
    summary.unlink()
    os.mkfifo(summary)  # Lightning's own profilers wait here for a reader for ever
    with pytest.warns(UserWarning, match=r"could not write the summary .*fit-s.txt: not a regular file \(a FIFO\)"):
        fit(StreamProfiler(dirpath=str(tmp_path), filename="s", skip_first=1, active=2, every=4, max_overhead=None), tmp_path, max_steps=6)
    assert stat.S_ISFIFO(os.lstat(summary).st_mode)
