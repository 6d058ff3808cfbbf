"""The StreamProfiler tab in headless Chromium, against a real ``tensorboard --logdir lightning_logs`` server over
the log directory of a real CPU training run: the runs are listed, the report renders inside the tab, the straggler
view of a two-rank run is reachable, a trace downloads, the console stays free of errors, and a screenshot is saved
(``.test-artifacts/tensorboard.png``).

The browser, and when it is skipped, are the report's browser test's (``tests/report/test_browser.py``).
"""

import contextlib
import glob
import gzip
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from helpers import fit

from lightning_streamprof import StreamProfiler
from lightning_streamprof.api import analyze_runs
from lightning_streamprof.report.html import render_report

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "report"))
from test_browser import ARTIFACTS, browser, pytestmark  # noqa: E402, F401 - the same browser and skip

TWO_RANKS = "fit-20261203-000000.000-00beef"


def _two_rank_run(logdir: str, one_rank: str) -> str:
    """A copy of the real run as two ranks (rank 1 a copy of rank 0's traces) in ``version_1``, its report
    rendered from its traces; its id."""
    run_dir = os.path.join(logdir, "version_1", "streamprof", TWO_RANKS)
    for path in glob.glob(os.path.join(one_rank, "w*", "rank0.*.pt.trace.json.gz")):
        with gzip.open(path, "rt") as f:
            trace = json.load(f)
        trace["streamprof"]["run"] = TWO_RANKS
        folder = os.path.join(run_dir, os.path.basename(os.path.dirname(path)))
        os.makedirs(folder, exist_ok=True)
        for rank in (0, 1):
            trace["distributedInfo"].update(rank=rank, world_size=2)
            with gzip.open(os.path.join(folder, os.path.basename(path).replace("rank0.", f"rank{rank}.")), "wt") as f:
                json.dump(trace, f)
    with open(os.path.join(run_dir, "report.html"), "w") as f:
        f.write(render_report(analyze_runs(run_dir), run_dir))
    return f"version_1/streamprof/{TWO_RANKS}"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """``lightning_logs`` of a real tiny CPU fit with the profiler, and a two-rank run beside it; the ids."""
    root = tmp_path_factory.mktemp("tb")
    profiler = StreamProfiler(skip_first=2, warmup=1, active=3, every=8, max_overhead=None)
    fit(profiler, root, max_steps=20, logger=True)
    reports = glob.glob(str(root / "lightning_logs" / "version_0" / "streamprof" / "fit-*" / "report.html"))
    assert len(reports) == 1, f"the training run wrote {len(reports)} reports, not one (its warnings say why)"
    report = reports[0]
    logs = str(root / "lightning_logs")
    one_rank = os.path.relpath(os.path.dirname(report), logs)
    return logs, one_rank, _two_rank_run(logs, os.path.dirname(report))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def tensorboard(logdir: str, log):
    """``tensorboard --logdir LOGDIR --port P`` as a subprocess (its output in ``log``); its address and its
    ``/data/plugins_listing``."""
    port = _free_port()
    script = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    command = [script] if os.path.exists(script) else [sys.executable, "-m", "tensorboard.main"]
    with open(log, "w") as out:
        process = subprocess.Popen([*command, "--logdir", logdir, "--port", str(port), "--host", "127.0.0.1"],
                                   stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/data/plugins_listing", timeout=5) as r:
                    listing = json.load(r)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"tensorboard did not start: {log.read_text()[-2000:]}")
                time.sleep(0.5)
        yield url, listing
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(logdir, tmp_path_factory):
    """A ``tensorboard --logdir`` server on the log directory, its tab active; its address."""
    with tensorboard(logdir[0], tmp_path_factory.mktemp("tb-log") / "tensorboard.log") as (url, listing):
        assert listing["streamprof"]["enabled"] is True, listing.get("streamprof")
        yield url


def _console_errors(browser) -> list:
    return [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _tab(browser, url: str, selector: str):
    """The StreamProfiler tab open, inside its frame once ``selector`` is there; the wait."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.wait import WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(f"{url}/#streamprof")
    wait.until(shown.frame_to_be_available_and_switch_to_it((By.TAG_NAME, "iframe")))
    wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, selector)))
    return wait


def _report_frame(browser, wait, selector: str):
    """Into the report's frame once ``selector`` shows there; the element."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown

    wait.until(shown.frame_to_be_available_and_switch_to_it((By.ID, "report")))
    return wait.until(shown.visibility_of_element_located((By.CSS_SELECTOR, selector)))


def test_the_tab_shows_the_runs_reports(browser, server, logdir):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown

    _, one_rank, two_ranks = logdir
    browser.set_window_size(1400, 1000)
    wait = _tab(browser, server, "#runs button")
    runs = {b.get_attribute("data-run"): b for b in browser.find_elements(By.CSS_SELECTOR, "#runs button")}
    assert set(runs) == {one_rank, two_ranks}

    runs[two_ranks].click()
    stragglers = browser.find_element(By.CSS_SELECTOR, '.sections a[data-section="distributed"]')
    assert stragglers.text == "Stragglers (per rank)"
    stragglers.click()
    bars = _report_frame(browser, wait, "#distributed svg rect")
    assert bars.rect["height"] > 0
    assert browser.execute_script("return location.hash") == "#distributed"

    browser.switch_to.default_content()
    wait.until(shown.frame_to_be_available_and_switch_to_it((By.TAG_NAME, "iframe")))
    browser.find_element(By.CSS_SELECTOR, f'#runs button[data-run="{one_rank}"]').click()
    assert browser.find_elements(By.CSS_SELECTOR, '.sections a[data-section="distributed"]') == []
    rows = browser.find_elements(By.CSS_SELECTOR, "table.windows tbody tr")
    assert len(rows) >= 2
    link = rows[0].find_element(By.CSS_SELECTOR, "a.trace").get_attribute("href")
    with urllib.request.urlopen(link, timeout=30) as r:
        assert r.headers["Content-Type"] == "application/gzip" and json.loads(gzip.decompress(r.read()))
    card = _report_frame(browser, wait, "#overview .card")
    assert "Step time" in card.text
    assert browser.find_element(By.CSS_SELECTOR, "#breakdown svg rect").is_displayed()
    title = browser.execute_script("return document.title")
    assert title == f"streamprof report: {one_rank.rsplit('/', 1)[-1]}"

    assert _console_errors(browser) == []
    os.makedirs(ARTIFACTS, exist_ok=True)
    shot = os.path.join(ARTIFACTS, "tensorboard.png")
    browser.switch_to.default_content()
    assert browser.save_screenshot(shot)
    assert os.path.getsize(shot) > 10_000


def test_an_empty_logdir_says_how_to_make_a_report(browser, tmp_path):
    from selenium.webdriver.common.by import By

    (tmp_path / "logs").mkdir()
    with tensorboard(str(tmp_path / "logs"), tmp_path / "tensorboard.log") as (url, listing):
        assert listing["streamprof"]["enabled"] is False
        _tab(browser, url, "#message")
        message = browser.find_element(By.ID, "message").text
    assert message.startswith(f"No StreamProfiler report under {tmp_path / 'logs'}: train with "
                              'Trainer(profiler="streamprof")'), message
    assert _console_errors(browser) == []
