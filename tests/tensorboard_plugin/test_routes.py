import base64
import gzip
import hashlib
import os

import pytest
from logdirs import RUN, make_run
from werkzeug.test import Client

from lightning_streamprof.report.page import SCRIPT
from lightning_streamprof.tensorboard_plugin.routes import apps
from lightning_streamprof.tensorboard_plugin.runs import RunIndex

RUN_ID = f"version_0/streamprof/{RUN}"
TRACE = "w000-step0000003/rank0.1796293500.pt.trace.json.gz"


def client(logdir) -> Client:
    """The plugin's routes, each at its own path."""
    routes = apps(RunIndex(str(logdir)))
    return Client(lambda environ, start: routes[environ["PATH_INFO"]](environ, start))


@pytest.fixture
def logdir(tmp_path):
    make_run(tmp_path / "logs", ranks=(0, 1))
    (tmp_path / "secret.txt").write_text("not to be served")
    return tmp_path / "logs"


def test_runs_lists_the_run_as_json(logdir):
    response = client(logdir).get("/runs")
    assert response.status_code == 200 and response.mimetype == "application/json"
    data = response.get_json()
    assert data["message"] is None
    (run,) = data["runs"]
    assert (run["id"], run["ranks"], run["dir"]) == (RUN_ID, [0, 1], os.path.join(str(logdir), *RUN_ID.split("/")))


def test_an_empty_logdir_says_how_to_make_a_report(tmp_path):
    data = client(tmp_path).get("/runs").get_json()
    assert data["runs"] == []
    assert data["message"].startswith(f"No StreamProfiler report under {tmp_path}: ")
    assert 'Trainer(profiler="streamprof")' in data["message"] and "\n" not in data["message"]


def test_a_remote_or_missing_logdir_is_one_line(tmp_path):
    assert "local log directories only" in client("gs://bucket/logs").get("/runs").get_json()["message"]
    assert "(not --logdir_spec)" in client("").get("/runs").get_json()["message"]


def test_the_report_is_served_as_html_with_its_own_script_allowed(logdir):
    response = client(logdir).get("/report", query_string={"run": RUN_ID})
    assert response.status_code == 200 and response.mimetype == "text/html"
    assert b"<title>streamprof report" in response.data
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    policy = response.headers["Content-Security-Policy"]
    assert f"'sha256-{digest}'" in policy and "'unsafe-inline'" not in policy.split("script-src")[1]
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_a_trace_downloads_as_gzip(logdir):
    response = client(logdir).get("/trace", query_string={"run": RUN_ID, "file": TRACE})
    assert response.status_code == 200 and response.mimetype == "application/gzip"
    assert response.headers["Content-Disposition"].startswith("attachment; filename=")
    assert RUN in response.headers["Content-Disposition"]
    assert gzip.decompress(response.data) == b'{"traceEvents": []}'


@pytest.mark.parametrize("run", ["../secret.txt", "..", "/etc", f"{RUN_ID}/..", f"{RUN_ID}/../../..", "version_0",
                                 f"version_0/streamprof/../streamprof/{RUN}", "%2e%2e/secret.txt"])
def test_a_run_id_is_never_a_path(logdir, run):
    routes = client(logdir)
    for route, extra in (("/report", {}), ("/trace", {"file": TRACE})):
        response = routes.get(route, query_string={"run": run, **extra})
        assert response.status_code == 404, (route, run)
        assert response.mimetype == "text/plain" and b"not to be served" not in response.data


@pytest.mark.parametrize("file", ["../../../../secret.txt", "report.html", "w000-step0000003/../report.html",
                                  "/etc/passwd", os.path.join("w000-step0000003", "x.pt.trace.json.gz"), ""])
def test_only_the_runs_own_traces_download(logdir, file):
    response = client(logdir).get("/trace", query_string={"run": RUN_ID, "file": file})
    assert response.status_code == 404
    assert response.data.decode().startswith(f"Run '{RUN_ID}' has no trace ")


def test_a_missing_run_argument_is_refused(logdir):
    response = client(logdir).get("/report")
    assert response.status_code == 400 and b"?run=" in response.data


def test_a_run_without_its_report_says_how_to_make_one(tmp_path):
    make_run(tmp_path, report=False)
    response = client(tmp_path).get("/report", query_string={"run": RUN_ID})
    assert response.status_code == 404 and b"streamprof report " in response.data


def test_a_report_swapped_for_a_link_outside_after_listing_is_refused(logdir, tmp_path):
    routes = client(logdir)
    assert routes.get("/runs").get_json()["runs"][0]["report"]
    report = os.path.join(str(logdir), *RUN_ID.split("/"), "report.html")
    os.remove(report)
    os.symlink(tmp_path / "secret.txt", report)
    response = routes.get("/report", query_string={"run": RUN_ID})
    assert response.status_code == 404 and b"not to be served" not in response.data


@pytest.mark.parametrize(("path", "kind", "text"), [
    ("/index.js", "application/javascript", b"export async function render"),
    ("/style.css", "text/css", b".streamprof"),
])
def test_the_frontend_files(tmp_path, path, kind, text):
    response = client(tmp_path).get(path)
    assert response.status_code == 200 and response.mimetype == kind and text in response.data
