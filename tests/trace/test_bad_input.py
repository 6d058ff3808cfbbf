"""The bad-input table of docs/reliability.md, every row: from the library one documented exception (TraceFormatError naming
the file and the reason) or a warning saying what was ignored with sane numbers; from the CLI exit 2 and one line,
or exit 0 and one warning line per problem."""

import json
import os
import socket
import sys
import threading
import time

import fsspec
import pytest
from badinput import IGNORED, REJECTED, VALID, base

from lightning_streamprof.api import analyze
from lightning_streamprof.cli import main
from lightning_streamprof.results.invariants import violations
from lightning_streamprof.trace import TraceFormatError


def cli(capsys, *args):
    code = main(["analyze", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error_line(err, path, reason):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"streamprof: error: {path}: ") and reason in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_rejected_with_one_line(tmp_path, capsys, case):
    make, reason = REJECTED[case]
    path = tmp_path / "bad.pt.trace.json.gz"
    path.write_bytes(make())
    with pytest.raises(TraceFormatError) as err:
        analyze(path)
    assert err.value.source == str(path) and reason in err.value.reason and "\n" not in str(err.value)
    for args in ((str(path),), (str(path), "--json")):
        code, out, err = cli(capsys, *args)
        assert code == 2 and out == ""
        one_error_line(err, path, reason)


@pytest.mark.parametrize("case", sorted(IGNORED))
def test_ignored_with_a_warning_and_sane_numbers(tmp_path, capsys, case):
    make, warning = IGNORED[case]
    path = tmp_path / "odd.pt.trace.json.gz"
    path.write_bytes(make())
    result = analyze(path)
    assert any(w.startswith(f"{path}: {warning}") for w in result.warnings), result.warnings
    assert violations(result) == []
    steps = result.steps
    lost_step = case in ("missing-timestamp", "negative-duration")  # the defect is in step 0's own range
    assert steps.count == 3 - lost_step and all(s.duration_ns > 0 for s in steps.per_step)
    for g in result.gpu:
        assert g.achieved_occupancy is None or 0 <= g.achieved_occupancy <= 1
    code, out, err = cli(capsys, str(path), "--json")
    assert code == 0 and json.loads(out)["warnings"] == result.warnings
    assert err.strip().splitlines() == [f"streamprof: warning: {w}" for w in result.warnings]


def test_duplicated_events_do_not_halve_the_steps(tmp_path):
    make, _ = IGNORED["duplicated-events"]
    path = tmp_path / "dup.pt.trace.json.gz"
    path.write_bytes(make())
    clean = tmp_path / "clean.pt.trace.json.gz"
    clean.write_bytes(VALID)
    assert analyze(path).steps.per_step == analyze(clean).steps.per_step


def test_negative_duration_step_is_left_out_not_summed_to_zero(tmp_path):
    make, _ = IGNORED["negative-duration"]
    path = tmp_path / "neg.pt.trace.json.gz"
    path.write_bytes(make())
    steps = analyze(path).steps
    assert [s.step for s in steps.per_step] == [1, 2]
    assert all(sum(s.breakdown_ns.values()) == s.duration_ns > 0 for s in steps.per_step)


def test_directory_with_one_bad_trace(tmp_path, capsys):
    """The others are analysed, the bad one named in a warning."""
    good = tmp_path / "good.pt.trace.json.gz"
    good.write_bytes(VALID)
    bad = tmp_path / "bad.pt.trace.json.gz"
    bad.write_bytes(VALID[:-6])
    result = analyze(tmp_path)
    assert [t.path for t in result.traces] == [str(good)]
    assert len(result.warnings) == 1 and result.warnings[0].startswith(f"{bad}: skipped: corrupt or truncated gzip")
    code, out, err = cli(capsys, str(tmp_path))
    assert code == 0 and "gemm" in out
    assert err.strip().splitlines() == [f"streamprof: warning: {result.warnings[0]}"]


def test_directory_of_only_bad_traces(tmp_path, capsys):
    for name in ("a", "b"):
        (tmp_path / f"{name}.pt.trace.json").write_bytes(b"nope")
    code, out, err = cli(capsys, str(tmp_path))
    assert code == 2
    one_error_line(err, tmp_path / "a.pt.trace.json", "invalid JSON")
    assert "(and 1 more unreadable traces)" in err


def test_no_such_path(capsys):
    code, out, err = cli(capsys, "/nonexistent/trace.json")
    assert code == 2 and out == ""
    one_error_line(err, "/nonexistent/trace.json", "no such file or directory")


def test_unknown_protocol(capsys):
    code, out, err = cli(capsys, "unknownproto://bucket/t.json")
    assert code == 2 and out == ""
    one_error_line(err, "unknownproto://bucket/t.json", "unknown protocol unknownproto://")


def _two_runs(root):
    for run in ("fit-1", "fit-2"):
        (root / run).mkdir()
        (root / run / "rank0.pt.trace.json.gz").write_bytes(VALID)


def test_several_runs(tmp_path, capsys):
    _two_runs(tmp_path)
    code, out, err = cli(capsys, str(tmp_path), "--json")
    assert code == 2 and out == ""
    one_error_line(err, tmp_path, "holds 2 runs (fit-1, fit-2); choose one with --run NAME")


def test_unknown_run(tmp_path, capsys):
    _two_runs(tmp_path)
    code, out, err = cli(capsys, str(tmp_path), "--run", "fit-3")
    assert code == 2 and out == ""
    one_error_line(err, tmp_path, "no run named 'fit-3' (runs: fit-1, fit-2)")


def _our_trace(root, run, name, window=0):
    """A trace as StreamProfiler writes it into ``root/<run directory>``, its metadata naming ``run``."""
    b = base()
    b.meta["streamprof"] = {"run": run, "window": window, "first_step": 0, "steps": 3, "host": "node-a"}
    b.meta["distributedInfo"] = {"backend": "none", "rank": 0, "world_size": 1}
    directory = root / "fit-20261201-120000" / f"w{window:03d}-step0000000"
    directory.mkdir(parents=True, exist_ok=True)
    return b.write(directory / name)


def test_window_recorded_twice(tmp_path, capsys):
    """Two runs named to the same second wrote into one directory (was: one run, steps 0, 1, 2, 0, 1, 2, no word)."""
    first = _our_trace(tmp_path, "fit-20261201-120000", "rank0.1.pt.trace.json.gz")
    second = _our_trace(tmp_path, "fit-20261201-120000", "rank0.2.pt.trace.json.gz")
    result = analyze(tmp_path)
    assert result.warnings == [
        f"run fit-20261201-120000: window 0 of rank 0 is in 2 traces ({first}, {second}); two runs wrote into one"
        " directory under one name?",
        "run fit-20261201-120000: step(s) 0, 1, 2 of rank 0 recorded more than once; the steps are not one run's"]
    code, out, err = cli(capsys, str(tmp_path))
    assert code == 0 and err.strip().splitlines() == [f"streamprof: warning: {w}" for w in result.warnings]


def test_several_run_identities_in_one_directory(tmp_path, capsys):
    """Traces of two runs in one directory are reported as two runs, whatever the directory says."""
    runs = ["fit-20261201-120000.001-aaaaaa", "fit-20261201-120000.001-bbbbbb"]
    for i, run in enumerate(runs):
        _our_trace(tmp_path, run, f"rank0.{i}.pt.trace.json.gz")
    code, out, err = cli(capsys, str(tmp_path))
    assert code == 0 and err == "" and all(f"run {run}" in out for run in runs)
    code, _, err = cli(capsys, str(tmp_path), "--json")
    assert code == 2 and f"holds 2 runs ({', '.join(runs)})" in err


def test_empty_directory(tmp_path, capsys):
    code, _, err = cli(capsys, str(tmp_path))
    assert code == 2
    one_error_line(err, tmp_path, "directory holds no Kineto trace")


# ------------------------------------------------------------------------------------------------ object stores
@pytest.fixture
def s3_config(monkeypatch):
    """Point ``s3://`` at a local endpoint (``set(endpoint, **options)``), with no credentials around."""
    pytest.importorskip("s3fs")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def configure(endpoint=None, **options):
        conf = {"skip_instance_cache": True, **options}
        if endpoint:
            conf["endpoint_url"] = endpoint
        monkeypatch.setitem(fsspec.config.conf, "s3", conf)

    return configure


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing_extra(monkeypatch, capsys, protocol, package):
    monkeypatch.delitem(sys.modules["fsspec.registry"]._registry, protocol, raising=False)
    monkeypatch.setitem(sys.modules, package, None)
    code, _, err = cli(capsys, f"{protocol}://bucket/run")
    assert code == 2
    one_error_line(err, f"{protocol}://bucket/run",
                   f"reading {protocol}:// needs {package}: pip install 'lightning-streamprof[{protocol}]'")


def test_s3_missing_extra(monkeypatch, capsys):
    _missing_extra(monkeypatch, capsys, "s3", "s3fs")


def test_gs_missing_extra(monkeypatch, capsys):
    _missing_extra(monkeypatch, capsys, "gs", "gcsfs")


@pytest.fixture
def gs_config(monkeypatch):
    """Configure ``gs://`` (``set(**options)``) with no Google credentials around."""
    pytest.importorskip("gcsfs")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent.json")
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # google-auth: do not probe the metadata server

    def configure(**options):
        monkeypatch.setitem(fsspec.config.conf, "gs", {"skip_instance_cache": True, **options})

    return configure


def test_gs_without_credentials(gs_config, capsys):
    """gcsfs looks for credentials when the filesystem is created (was an internal error, exit 1)."""
    gs_config(token="google_default")
    code, _, err = cli(capsys, "gs://bucket/run")
    assert code == 2
    one_error_line(err, "gs://bucket/run", "no credentials")


def test_gs_connection_refused(gs_config, capsys, monkeypatch):
    """gcsfs retries a refused connection with back-off (about 30 s over 6 tries): the I/O time-out ends it, and
    the reason is the refused connection (was "did not answer")."""
    monkeypatch.setenv("STREAMPROF_IO_TIMEOUT", "3")
    gs_config(token="anon", endpoint_url=f"http://127.0.0.1:{_free_port()}")
    t0 = time.monotonic()
    code, _, err = cli(capsys, "gs://bucket/run")
    assert code == 2 and time.monotonic() - t0 < 15
    one_error_line(err, "gs://bucket/run", "connection refused")
    assert "still failing after 3 s of retries" in err


def test_s3_without_credentials(s3_config, capsys):
    s3_config()
    code, _, err = cli(capsys, "s3://bucket/run")
    assert code == 2
    one_error_line(err, "s3://bucket/run", "no credentials")


def test_s3_connection_refused(s3_config, capsys):
    s3_config(f"http://127.0.0.1:{_free_port()}", key="k", secret="s")
    code, _, err = cli(capsys, "s3://bucket/run")
    assert code == 2
    one_error_line(err, "s3://bucket/run", "connection refused")
    assert "no such file" not in err


def test_s3_endpoint_that_does_not_answer(s3_config, capsys, monkeypatch):
    """A server that accepts connections and never answers: bounded by STREAMPROF_IO_TIMEOUT."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    s3_config(f"http://127.0.0.1:{server.getsockname()[1]}", key="k", secret="s")
    monkeypatch.setenv("STREAMPROF_IO_TIMEOUT", "1")
    try:
        code, _, err = cli(capsys, "s3://bucket/run")
    finally:
        stop.set()
        for conn in held:
            conn.close()
        server.close()
    assert code == 2
    one_error_line(err, "s3://bucket/run", "did not answer within 1 s")


# ------------------------------------------------------------------------------------------------ names
def _named(name):
    b = base()
    for e in b.events:
        if e["cat"] in ("kernel", "cpu_op"):
            e["name"] = name
    return b


def _shown_safely(tmp_path, capsys, name):
    path = _named(name).write(tmp_path / "names.pt.trace.json.gz")
    code, out, err = cli(capsys, str(path))
    assert code == 0 and err == ""
    assert not any(c in out for c in "\x1b\r\x07\u202e")
    if name.startswith("["):
        assert name in out  # shown as written, not read as markup
    data = json.loads(cli(capsys, str(path), "--json")[1])
    assert {k["name"] for k in data["kernels"]} == {name}  # the JSON keeps the name itself
    return out


@pytest.mark.parametrize("name", ["[/x]", "[bold red]x[/]", "[link=file:///etc/passwd]x"])
def test_markup_in_names(tmp_path, capsys, name):
    _shown_safely(tmp_path, capsys, name)


@pytest.mark.parametrize("name", ["\x1b[31mred\x1b[0m\x1b[2J", "a\rb\x07c\nd", "rtl\u202eevil"])
def test_control_characters_in_names(tmp_path, capsys, name):
    out = _shown_safely(tmp_path, capsys, name)
    assert "\\x1b" in out or "\\x0d" in out or "\\u202e" in out


def test_script_kernel_name(tmp_path, capsys):
    from lightning_streamprof.escape import for_html

    name = "<script>alert(1)</script>"
    path = _named(name).write(tmp_path / "script.pt.trace.json.gz")
    code, out, _ = cli(capsys, str(path), "--json")
    assert code == 0 and json.loads(out)["kernels"][0]["name"] == name
    assert for_html(name) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert "<" not in for_html('x"<\x1b') and "\\x1b" in for_html("\x1b")


def test_fixture_traces_read_without_warnings():
    folder = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "traces")
    for name in sorted(os.listdir(folder)):
        result = analyze(os.path.join(folder, name))
        assert result.warnings == [] and violations(result) == []
