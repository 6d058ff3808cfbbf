"""Cloud storage end to end: train with ``dirpath="s3://..."`` against a local S3-compatible server (moto's
server mode on loopback), then ``streamprof analyze``, ``report`` and ``compare`` read the run back."""

import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("s3fs", reason="needs the s3 extra (pip install -e '.[test]')")
moto_server = pytest.importorskip("moto.server", reason="needs moto[server] (the test extra)")

from helpers import fit  # noqa: E402

from lightning_streamprof import StreamProfiler, names  # noqa: E402

BUCKET = "streamprof-test"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3(monkeypatch):
    """A moto S3 server on 127.0.0.1 with one bucket; fsspec in this process and the environment of child
    processes point at it."""
    import fsspec
    import s3fs

    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    import urllib.request

    # moto keeps its buckets in the process across servers: start each test from none
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30).close()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "FSSPEC_S3_ENDPOINT_URL": endpoint, "FSSPEC_S3_KEY": "testing", "FSSPEC_S3_SECRET": "testing"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": endpoint, "key": "testing", "secret": "testing"})
    s3fs.S3FileSystem.clear_instance_cache()
    fs = fsspec.filesystem("s3")
    fs.mkdir(BUCKET)
    try:
        yield fs
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()


def _streamprof(*args):
    return subprocess.run([sys.executable, "-m", "lightning_streamprof.cli", *args], capture_output=True, text=True,
                          timeout=300, env=os.environ.copy())


def test_train_to_s3_then_analyze_report_and_compare(s3, tmp_path):
    prof = StreamProfiler(dirpath=f"s3://{BUCKET}/prof", skip_first=3, warmup=1, active=2, every=10,
                          max_overhead=None)
    fit(prof, tmp_path, max_steps=25)
    windows = prof.windows
    assert len(windows) == 3 and all(w.path.startswith(f"s3://{BUCKET}/prof/fit-") for w in windows)
    traces = s3.glob(f"{BUCKET}/prof/*/*/rank0.*.pt.trace.json.gz")
    assert len(traces) == 3
    run_dir = "s3://" + traces[0].rsplit("/", 2)[0]
    assert s3.exists(f"{run_dir}/{names.REPORT_FILE}")
    assert f"HTML report (open it in a browser): {run_dir}/{names.REPORT_FILE}" in prof.summary()

    analyzed = _streamprof("analyze", f"s3://{BUCKET}/prof")
    assert analyzed.returncode == 0, analyzed.stderr
    assert "3 traces" in analyzed.stdout and "cpu_exec" in analyzed.stdout

    out = tmp_path / "report.html"
    reported = _streamprof("report", run_dir, "-o", str(out))
    assert reported.returncode == 0, reported.stderr
    html = out.read_text()
    assert 'id="breakdown"' in html and "window 1" in html and windows[1].path in html

    to_s3 = _streamprof("report", run_dir, "-o", f"{run_dir}/again.html")
    assert to_s3.returncode == 0, to_s3.stderr
    s3.invalidate_cache()  # written by another process
    assert s3.cat(f"{run_dir}/again.html").startswith(b"<!DOCTYPE html>")

    w0, w1 = (w.path.rsplit("/", 1)[0] for w in windows[:2])
    compared = _streamprof("compare", w0, w1)
    assert compared.returncode == 0, compared.stderr
    assert f"A: {w0}" in compared.stdout and "Step breakdown (ms per step)" in compared.stdout


_WRITER = """
import gzip, json, sys
sys.path[:0] = [{tests!r}, {tests!r} + '/distributed']
from multihost import HOSTS, RUN, WINDOW_DIR, rank_trace
from lightning_streamprof.profiling.storage import write_atomic
host = sys.argv[1]
for rank in [r for r, h in HOSTS.items() if h == host]:
    data = gzip.compress(json.dumps(rank_trace(rank).to_dict()).encode())
    for prefix in ('shared', host):
        write_atomic(f's3://{bucket}/{{prefix}}/{{RUN}}/{{WINDOW_DIR}}/rank{{rank}}.{{1000 + rank}}.pt.trace.json.gz', data)
"""


def test_two_hosts_writing_to_s3_read_as_one_run(s3, tmp_path):
    """Two writers (one process per host, as each host's profiler writes its ranks' traces) put a 4-rank run under
    one shared prefix and under a prefix per host; both layouts read back as one run with every rank."""
    tests = os.path.dirname(os.path.abspath(__file__))
    code = _WRITER.format(tests=tests, bucket=BUCKET)
    writers = [subprocess.Popen([sys.executable, "-c", code, host], env=os.environ.copy(), stderr=subprocess.PIPE,
                                text=True) for host in ("node-a", "node-b")]
    for w in writers:
        assert w.wait(120) == 0, w.stderr.read()
    s3.invalidate_cache()
    assert len(s3.glob(f"{BUCKET}/shared/*/*/*.pt.trace.json.gz")) == 4

    shared = _streamprof("analyze", f"s3://{BUCKET}/shared", "--json")
    assert shared.returncode == 0, shared.stderr
    import json

    d = json.loads(shared.stdout)["distributed"]
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3] and d["stragglers"] == [3] and d["missing_ranks"] == []
    assert {r["host"] for r in d["ranks"]} == {"node-a", "node-b"}

    out = tmp_path / "report.html"
    per_host = _streamprof("report", f"s3://{BUCKET}/node-a", f"s3://{BUCKET}/node-b", "-o", str(out))
    assert per_host.returncode == 0, per_host.stderr
    html = out.read_text(encoding="utf-8")
    assert "4 ranks on 2 hosts (node-a, node-b)" in html and "rank 3 (straggler)" in html
