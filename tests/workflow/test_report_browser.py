"""The smoke run's `snakemake --report` page, opened in headless Chromium and clicked through.

Driven by Selenium and Debian's chromium-driver (the same build as the chromium package): every
category, subcategory and result is clicked as a reader would; a JavaScript error (a SEVERE
console entry), a blank page, a broken image or a table that is not an html <table> fails.
Skipped when Chromium or its driver is not installed (`apt-get install chromium chromium-driver`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

CHROMIUM_FLAGS = [  # Chromium as root in a container, offline, nothing kept between runs
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
]
WAIT_S = 20


def _executable(*names: str) -> str | None:
    return next((path for name in names if (path := shutil.which(name))), None)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = _executable("chromium", "chromium-browser", "google-chrome")
    driver = _executable("chromedriver")
    if chromium is None or driver is None:
        pytest.skip(
            "Chromium or chromedriver not found on PATH: install them to run the report's "
            "browser test (Debian: apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    yield chrome
    chrome.quit()


class ReportPage:
    """The report open in the browser, with every JavaScript error seen so far."""

    def __init__(self, driver, path: Path):
        self.driver = driver
        self.errors: list[str] = []
        driver.get(path.as_uri())
        self.wait_for(lambda d: d.find_elements(By.CSS_SELECTOR, "nav ul"), "the menu")

    def wait_for(self, condition, what: str):
        wait = WebDriverWait(self.driver, WAIT_S, poll_frequency=0.05)
        return wait.until(condition, f"timed out waiting for {what}")

    def check(self, step: str) -> None:
        """Record the console errors of ``step``; fail at once if the page went blank."""
        logs = self.driver.get_log("browser")
        severe = [e["message"].splitlines()[0] for e in logs if e["level"] == "SEVERE"]
        self.errors += [f"{step}: {message}" for message in severe]
        if not self.driver.find_elements(By.CSS_SELECTOR, "nav"):
            pytest.fail(f"the report page went blank after {step}: {self.errors}")

    def menu_links(self) -> dict[str, object]:
        """The side panel's links by their text (categories, subcategories, rules...)."""
        links = self.driver.find_elements(By.CSS_SELECTOR, "nav div.p-3 a")
        return {a.text.strip(): a for a in links if a.text.strip()}

    def click_menu(self, name: str) -> None:
        self.menu_links()[name].click()
        self.check(f"clicking {name!r}")

    def result_rows(self) -> list:
        """The rows of the results list now in the side panel (one per result)."""
        return self.driver.find_elements(By.CSS_SELECTOR, "nav div.p-3 table tbody tr")


def _categories(page: ReportPage) -> list[str]:
    return page.driver.execute_script("return Object.keys(categories).sort()")


def _subcategories(page: ReportPage, category: str) -> list[str]:
    return page.driver.execute_script(f"return Object.keys(categories[{category!r}]).sort()")


def _view_image(page: ReportPage, step: str) -> None:
    img = page.wait_for(
        lambda d: d.find_elements(By.CSS_SELECTOR, "div.p-3 > img"), f"the image of {step}"
    )[0]
    page.wait_for(lambda d: d.execute_script("return arguments[0].complete", img), step)
    width = page.driver.execute_script("return arguments[0].naturalWidth", img)
    assert width > 0, f"{step}: broken image"


def _view_table(page: ReportPage, step: str) -> dict:
    """The table page of ``step``, read inside its iframe: its tables' html and text."""
    frame = page.wait_for(lambda d: d.find_elements(By.TAG_NAME, "iframe"), f"{step}'s frame")[0]
    page.driver.switch_to.frame(frame)
    try:
        tables = page.wait_for(lambda d: d.find_elements(By.TAG_NAME, "table"), f"{step}'s table")
        return {
            "html": "".join(t.get_attribute("outerHTML") for t in tables),
            "text": page.driver.find_element(By.TAG_NAME, "body").text,
        }
    finally:
        page.driver.switch_to.default_content()


def _visit_results(page: ReportPage, where: str, tables: dict) -> int:
    """Click every result of the list in the side panel and look at what it shows (each table
    read into ``tables``); return how many results there were."""
    rows = page.result_rows()
    for i in range(len(rows)):
        row = page.result_rows()[i]
        step = f"{where}/{row.find_element(By.TAG_NAME, 'td').text}"
        before = page.driver.execute_script("return app.state.resultPath")
        row.find_elements(By.CSS_SELECTOR, "a[type=button]")[0].click()  # the eye: show it
        page.check(step)
        page.wait_for(
            lambda d, b=before: d.execute_script("return app.state.resultPath") != b, step
        )
        content = page.driver.execute_script("return app.state.content")
        if content == "img":
            _view_image(page, step)
        elif content == "html":
            tables[step] = _view_table(page, step)
        else:
            pytest.fail(f"{step} shows {content!r}, neither a figure nor a table")
    return len(rows)


def test_every_category_and_result_of_the_report_opens_without_errors(browser, report_html):
    page = ReportPage(browser, report_html)
    categories = _categories(page)
    assert {"leaderboard", "opamp", "rectification", "mudaf", "lkg"} <= set(categories)
    tables: dict[str, dict] = {}
    seen, errors = 0, []
    for category in categories:
        for subcategory in _subcategories(page, category):
            page = ReportPage(browser, report_html)  # from the landing page each time
            page.click_menu(category)
            if len(_subcategories(page, category)) > 1:  # a single one opens with its category
                page.click_menu(subcategory)
            seen += _visit_results(page, f"{category}/{subcategory}", tables)
            errors += page.errors
    assert errors == []
    assert seen == browser.execute_script("return Object.keys(results).length") > 0
    assert tables and not [step for step, t in tables.items() if "**" in t["text"]]
    board = next(t["html"] for step, t in tables.items() if step.endswith("/leaderboard"))
    assert "<td><strong>" in board and ">column<" not in board


def _side_panel_naming(name: str):
    """A wait condition: the side panel's text, once it names ``name``."""

    def condition(driver):
        text = driver.find_element(By.CSS_SELECTOR, "nav div.p-3").text
        return text if name in text else None

    return condition


def test_every_result_info_panel_shows_its_caption_without_errors(browser, report_html):
    """Every result's info panel (what its (i) button opens), caption included."""
    page = ReportPage(browser, report_html)
    paths = browser.execute_script("return Object.keys(results)")
    for path in paths:
        browser.execute_script("app.showResultInfo(arguments[0])", path)
        page.check(f"the info panel of {path}")
        panel = page.wait_for(_side_panel_naming(Path(path).stem), f"{path}'s panel")
        assert "preset smoke" in panel and "commit" in panel, (path, panel)
        assert "provenance.json is unreadable" not in panel, (path, panel)
        assert '"code"' not in panel and '\\"' not in panel, ("a spec's JSON", path, panel)
    assert page.errors == []


def test_landing_page_lists_each_rule_once_and_each_opens_its_panel(browser, report_html):
    page = ReportPage(browser, report_html)
    links = page.driver.find_elements(By.CSS_SELECTOR, "table.zoomattn-rules a")
    rules = [a.text for a in links]
    assert len(rules) == len(set(rules)), rules
    assert {"world", "finetune", "evaluate", "report"} <= set(rules)
    assert not page.driver.find_element(By.ID, "rulegraph").is_displayed()
    for i, rule in enumerate(rules):
        page.driver.find_elements(By.CSS_SELECTOR, "table.zoomattn-rules a")[i].click()
        shown = f"the panel of rule {rule}"  # (a javascript: link runs after the click returns)
        page.wait_for(lambda d, r=rule: d.execute_script("return app.state.ruleinfo") == r, shown)
        page.check(shown)
        panel = page.driver.find_element(By.CSS_SELECTOR, "nav div.p-3").text
        assert "No metadata available" not in panel and "code" in panel.lower(), (rule, panel)
    assert page.errors == []
