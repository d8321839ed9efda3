"""report.html in a real browser (headless Chromium): no console errors, findings and charts render.

Screenshots go to tests/artifacts/ (git-ignored) for a person to look at. Chromium and chromedriver
come from scripts/install-test-deps.sh; when they are missing this test fails, it does not skip.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from processes import carrying_owner_token, cmdline, descendants, stop
from report_helpers import FIXTURES, SCRIPT, hostile_summary, injected
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from traceanalyze.output.html import write_html

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
PARALLEL = Path(__file__).resolve().parent.parent / "fixtures" / "parallel"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SCENARIO = "input_straggler"
CHART_IDS = ["chart-timeline", "chart-step-times", "chart-lateness", "chart-phases"]


@pytest.fixture(scope="module")
def driver():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(f"{missing} not installed: run scripts/install-test-deps.sh")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="traceanalyze-chromium-")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--window-size=1280,1000", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(CHROMEDRIVER)
    try:
        drv = webdriver.Chrome(service=service, options=options)
        try:
            yield drv
        finally:
            drv.quit()
    finally:
        # chromedriver and the browser under it, whatever happened above (quit() may fail
        # with the browser gone); only this fixture's own processes, found through /proc
        process = getattr(service, "process", None)
        if process is not None:
            stop([process.pid, *descendants(process.pid)])
            process.wait()
        stop([pid for pid in carrying_owner_token() if any(profile in arg for arg in cmdline(pid))])  # (orphans)
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def summary(fixture_summary) -> dict:
    return fixture_summary(FIXTURES / SCENARIO, f"fixtures/ddp/{SCENARIO}")


def _open(driver, summary: dict, folder: Path) -> list[dict]:
    """Open the report; returns the console messages it produced."""
    path = write_html(summary, folder / "report.html", "reports/x/trace.duckdb")
    driver.get_log("browser")  # drop messages of earlier pages
    driver.get(path.resolve().as_uri())
    driver.execute_script("return document.readyState")
    return driver.get_log("browser")


def _full_page_screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(height + 120, 16000))
    out = ARTIFACTS / name
    driver.save_screenshot(str(out))
    driver.set_window_size(1280, 1000)
    return out


def _errors(log: list[dict]) -> list[dict]:
    return [m for m in log if m["level"] in ("SEVERE", "ERROR")]


def test_report_renders_findings_and_charts_without_console_errors(driver, summary, tmp_path):
    log = _open(driver, summary, tmp_path)
    assert _errors(log) == []
    cards = driver.find_elements(By.CSS_SELECTOR, "article.finding")
    assert len(cards) == len(summary["findings"]) and cards
    assert all(c.is_displayed() for c in cards)
    expected = CHART_IDS + (["chart-memory"] if summary["memory"] else [])
    for chart_id in expected:
        svg = driver.find_element(By.ID, chart_id)
        box = driver.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", svg)
        assert box[0] > 600 and box[1] > 80, (chart_id, box)
        assert len(svg.find_elements(By.CSS_SELECTOR, "rect, circle")) > 4, chart_id
    shot = _full_page_screenshot(driver, f"report_{SCENARIO}.png")
    assert shot.stat().st_size > 20_000


def test_the_straggler_row_is_highlighted_in_the_timeline(driver, summary, tmp_path):
    _open(driver, summary, tmp_path)
    rank = injected(SCENARIO)["rank"]
    hot = driver.find_elements(By.CSS_SELECTOR, "#chart-timeline text.lbl-hot")
    assert f"rank {rank}" in {t.text for t in hot}
    colour = driver.execute_script("return getComputedStyle(arguments[0]).fill", hot[0])
    plain = driver.find_element(By.CSS_SELECTOR, "#chart-timeline text.lbl:not(.lbl-hot)")
    assert colour != driver.execute_script("return getComputedStyle(arguments[0]).fill", plain)


def test_phase_bars_are_coloured_by_phase(driver, summary, tmp_path):
    _open(driver, summary, tmp_path)
    fills = driver.execute_script("""
        const out = {};
        document.querySelectorAll('#chart-phases rect.ph').forEach(r => {
            const phase = [...r.classList].find(c => c.startsWith('ph-'));
            out[phase] = getComputedStyle(r).fill;
        });
        return out;""")
    assert len(fills) >= 3
    assert len(set(fills.values())) == len(fills)  # each phase its own colour


def test_hostile_trace_strings_show_as_text_and_never_run(driver, summary, tmp_path):
    log = _open(driver, hostile_summary(summary), tmp_path)
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018
    assert _errors(log) == []
    titles = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "article.finding h3")]
    assert f"kernel {SCRIPT} is tiny" in titles
    assert driver.execute_script("return document.querySelectorAll('script').length") == 1
    assert driver.execute_script("return document.querySelectorAll('img').length") == 0


def test_copy_button_reacts_without_errors(driver, summary, tmp_path):
    _open(driver, summary, tmp_path)
    button = driver.find_element(By.CSS_SELECTOR, "button.copy")
    button.click()
    WebDriverWait(driver, 10).until(lambda d: d.execute_script("return arguments[0].textContent", button) != "Copy")
    assert driver.execute_script("return arguments[0].textContent", button) in ("Copied", "Select & copy")
    assert _errors(driver.get_log("browser")) == []


@pytest.fixture(scope="module")
def parallel_summary(fixture_summary) -> dict:
    return fixture_summary(PARALLEL / "pp2_dp2_tp2_3d", "fixtures/parallel/pp2_dp2_tp2_3d")


def test_process_groups_section_renders_a_heatmap_per_dimension_and_the_pipeline(driver, parallel_summary, tmp_path):
    """The 3-D job (PP 2 x DP 2 x TP 2): the section's charts are drawn, sized, hoverable, error-free."""
    log = _open(driver, parallel_summary, tmp_path)
    assert _errors(log) == []
    section = driver.find_element(By.ID, "groups")
    assert section.is_displayed() and "PP 2 x DP 2 x TP 2" in section.text
    assert driver.find_element(By.CSS_SELECTOR, 'nav.toc a[href="#groups"]').is_displayed()
    ranks = len(parallel_summary["ranks"])
    steps = len(parallel_summary["steps"]["aligned"])
    for chart_id in ("chart-group-lateness-data", "chart-group-lateness-tensor", "chart-pipeline"):
        svg = driver.find_element(By.ID, chart_id)
        box = driver.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", svg)
        assert box[0] > 600 and box[1] > 80, (chart_id, box)
    for dim in ("data", "tensor"):   # a cell per rank and step, each with its numbers on hover
        cells = driver.find_elements(By.CSS_SELECTOR, f"#chart-group-lateness-{dim} rect.cell")
        titled = [c for c in cells if c.find_elements(By.TAG_NAME, "title")
                  and "ms late" in c.find_element(By.TAG_NAME, "title").get_attribute("textContent")
                  and "· step " in c.find_element(By.TAG_NAME, "title").get_attribute("textContent")]
        assert len(titled) == ranks * steps, dim
    # the pipeline's lanes: one per rank, the waits coloured as pipeline_wait
    lanes = driver.find_elements(By.CSS_SELECTOR, "#chart-pipeline rect.tl-step")
    assert len(lanes) == ranks
    waits = driver.find_elements(By.CSS_SELECTOR, "#chart-pipeline rect.ph-pipeline_wait")
    assert waits and len({driver.execute_script("return getComputedStyle(arguments[0]).fill", w) for w in waits}) == 1
    shot = ARTIFACTS / "report_pp2_dp2_tp2_3d_groups.png"
    ARTIFACTS.mkdir(exist_ok=True)
    _full_page_screenshot(driver, "report_pp2_dp2_tp2_3d.png")
    section = driver.find_element(By.ID, "groups")
    section.screenshot(str(shot))
    assert shot.stat().st_size > 20_000
