"""The HTML report in headless Chromium: every section renders with data, sorting works, the console stays free
of errors, and a screenshot is saved (``.test-artifacts/report.png``).

``./dev test`` installs Debian's ``chromium`` and ``chromium-driver`` when they are missing (as root, with apt-get);
without them this test is skipped and says why.
"""

import os
import shutil

import pytest
from reports import DISTRIBUTED, MEMORY_STACK, fixture_run

from lightning_streamprof.report.html import render_report

webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARTIFACTS = os.path.join(ROOT, ".test-artifacts")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
SECTIONS = {  # section -> what shows that it rendered with data
    "overview": ".card", "breakdown": "svg rect", "gpu": "svg polyline", "kernels": "table tbody tr",
    "operators": "table tbody tr", "memory": "svg polyline", "distributed": "svg rect",
    "recommendations": ".rec", "pipeline": "pre", "traces": "table tbody tr",
}

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="Chromium is not installed: `./dev test` installs Debian's chromium and chromium-driver when it runs as "
           "root with apt-get (or: apt-get install -y chromium chromium-driver)",
)


@pytest.fixture
def browser(tmp_path):
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1300,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_report_renders_in_chromium(browser, tmp_path):
    from selenium.webdriver.common.by import By

    run = fixture_run(distributed=DISTRIBUTED)
    page = tmp_path / "report.html"
    page.write_text(render_report([run], MEMORY_STACK, pipeline={run.run: "StreamPipeline (auto): pipelined"}))
    browser.get(page.as_uri())
    assert browser.title.startswith("streamprof report")
    for section, selector in SECTIONS.items():
        element = browser.find_element(By.ID, section)
        assert element.is_displayed(), section
        found = element.find_elements(By.CSS_SELECTOR, selector)
        assert found and found[0].is_displayed(), f"{section}: no {selector}"
        box = found[0].rect
        assert box["width"] > 0 and box["height"] > 0, section

    kernels = browser.find_element(By.ID, "kernels")
    calls = kernels.find_elements(By.CSS_SELECTOR, "thead th")[1]
    assert calls.text == "calls"

    def column():
        return [int(r.find_elements(By.TAG_NAME, "td")[1].text)
                for r in kernels.find_elements(By.CSS_SELECTOR, "tbody tr")]

    calls.click()
    assert column() == sorted(column())
    calls.click()
    assert column() == sorted(column(), reverse=True)

    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == []
    os.makedirs(ARTIFACTS, exist_ok=True)
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1300, min(int(height) + 100, 12000))
    shot = os.path.join(ARTIFACTS, "report.png")
    assert browser.save_screenshot(shot)
    assert os.path.getsize(shot) > 10_000
