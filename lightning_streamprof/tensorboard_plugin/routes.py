"""The plugin's HTTP routes (WSGI applications under ``/data/plugin/streamprof/``).

``/index.js`` and ``/style.css`` are the tab's frontend; ``/runs`` lists the runs as JSON; ``/report?run=ID`` is a
run's report and ``/trace?run=ID&file=W/NAME`` one of its traces, as a download. ``ID`` and ``W/NAME`` are looked up
among the runs found (:mod:`.runs`), never joined to a path, so that nothing but a run's report and traces is served.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from importlib import resources

from tensorboard.backend import http_util
from werkzeug import Request, Response
from werkzeug.utils import send_file

from lightning_streamprof.names import REPORT_FILE
from lightning_streamprof.report.page import SCRIPT
from lightning_streamprof.tensorboard_plugin.runs import Run, RunIndex, file_under

#: the frontend's files and their content types
STATIC = {"/index.js": "application/javascript", "/style.css": "text/css"}
HOW_TO = ('train with Trainer(profiler="streamprof") (each stage writes '
          "<log_dir>/streamprof/<stage>-<time>/report.html), then reload this page")


def _script_hash() -> str:
    """The CSP hash of the report's one inline script (sortable tables); no other script in a report runs."""
    return base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")


def _refuse(request: Request, code: int, text: str) -> Response:
    return http_util.Respond(request, text, "text/plain", code=code)


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name.lstrip("/")).read_bytes()


def listing(index: RunIndex) -> dict:
    """What ``/runs`` answers: the log directory, its runs, and a line for the tab when there are none."""
    if not index.logdir:
        return {"logdir": "", "runs": [], "message": "The StreamProfiler tab reads the directory of --logdir "
                                                     "(not --logdir_spec): tensorboard --logdir lightning_logs"}
    if "://" in index.logdir:
        return {"logdir": index.logdir, "runs": [],
                "message": f"The StreamProfiler tab reads local log directories only, not {index.logdir}."}
    runs = index.runs()
    if not runs:
        return {"logdir": index.logdir, "runs": [],
                "message": f"No StreamProfiler report under {index.logdir}: {HOW_TO}."}
    return {"logdir": index.logdir, "runs": [dict(r.to_json(), dir=r.path) for r in runs], "message": None}


def _report(request: Request, run: Run, root: str) -> Response:
    path = os.path.join(run.path, REPORT_FILE)
    if not (run.report and file_under(path, root)):
        return _refuse(request, 404, f"Run {run.id!r} has no report yet: streamprof report {run.path} -o {path}")
    with open(path, "rb") as f:
        html = f.read()
    return http_util.Respond(request, html, "text/html", csp_scripts_sha256s=[_script_hash()])


def _trace(request: Request, run: Run, root: str) -> Response:
    name = request.args.get("file", "")
    found = run.files().get(name)
    path = os.path.join(run.path, *name.split("/")) if found else ""
    if not (found and file_under(path, root)):
        return _refuse(request, 404, f"Run {run.id!r} has no trace {name!r}.")
    download = f"{os.path.basename(run.path)}_{name.replace('/', '_')}"
    response = send_file(path, request.environ, mimetype="application/gzip" if name.endswith(".gz")
                         else "application/json", as_attachment=True, download_name=download)
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def apps(index: RunIndex) -> dict[str, Callable]:
    """The plugin's routes over the runs of ``index``."""

    def of_run(serve: Callable[[Request, Run, str], Response]) -> Callable:
        """``serve`` for the run of ``?run=ID``, and the log directory's real path."""

        @Request.application
        def app(request: Request) -> Response:
            run_id = request.args.get("run")
            if not run_id:
                return _refuse(request, 400, "Missing ?run=<run id> (one of /runs).")
            run = index.get(run_id)
            if run is None:
                return _refuse(request, 404, f"No StreamProfiler run {run_id!r} under the logdir.")
            return serve(request, run, os.path.realpath(index.logdir))

        return app

    @Request.application
    def runs(request: Request) -> Response:
        return http_util.Respond(request, listing(index), "application/json")

    def static(name: str, content_type: str) -> Callable:
        @Request.application
        def serve(request: Request) -> Response:
            return http_util.Respond(request, _static(name), content_type)

        return serve

    return {"/runs": runs, "/report": of_run(_report), "/trace": of_run(_trace),
            **{name: static(name, kind) for name, kind in STATIC.items()}}
