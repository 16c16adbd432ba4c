"""The web page in headless Chromium against the real server: translate Korean, then explore attention.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them) and selenium; skips without.
``KOTRANS_SCREENSHOT=docs/web-page.png`` also writes the screenshot the README shows, and
``KOTRANS_SCREENSHOT_MODEL=models/default`` takes it with the released model instead of the fixture one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402
from test_serving import TIMEOUT, LiveServer, event_loop_thread  # noqa: E402, F401

from nmt.explain import explain  # noqa: E402
from nmt.translator import Translator  # noqa: E402
from serving.config import HttpConfig, ServerConfig  # noqa: E402

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="no headless browser: apt-get install chromium chromium-driver")
TEXT = "나는 학생입니다"
ROWS = "[data-testid=heatmap-row]"


@pytest.fixture(scope="module")
def translator(fixture_translator) -> Translator:
    model = os.environ.get("KOTRANS_SCREENSHOT_MODEL")
    return Translator.load(model, device="cpu") if model else fixture_translator


@pytest.fixture(scope="module")
def server(event_loop_thread, translator) -> Iterator[LiveServer]:  # noqa: F811
    live = LiveServer(event_loop_thread, translator, ServerConfig(port=0, http=HttpConfig(port=0)))
    yield live
    live.close()


@pytest.fixture
def browser(tmp_path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(TIMEOUT)
    yield driver
    driver.quit()


def heatmap_cells(browser) -> list[str]:
    return [cell.value_of_css_property("background-color") for cell in browser.find_elements(By.CSS_SELECTOR, f"{ROWS} td")]


def test_translate_korean_and_explore_attention(server, browser, translator, tmp_path):
    wait = WebDriverWait(browser, TIMEOUT)
    browser.get(f"http://127.0.0.1:{server.server.http.port}/")
    wait.until(lambda b: b.find_element(By.ID, "target-lang").get_attribute("value") == "en")
    Select(browser.find_element(By.ID, "source-lang")).select_by_value("ko")
    browser.find_element(By.CSS_SELECTOR, "[data-testid=text]").send_keys(TEXT)
    browser.find_element(By.CSS_SELECTOR, "[data-testid=translate]").click()

    expected = explain(translator, TEXT, "ko", "en")
    wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "[data-testid=translation]").text)
    assert browser.find_element(By.CSS_SELECTOR, "[data-testid=translation]").text == expected.translation.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "[data-testid=hypotheses] li")) >= 1
    target_pieces = expected.sentences[0].target_pieces
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ROWS)) == len(target_pieces))
    row_labels = [row.find_element(By.TAG_NAME, "th").text for row in browser.find_elements(By.CSS_SELECTOR, ROWS)]
    assert row_labels == target_pieces

    layers, heads = expected.sentences[0].cross.shape[:2]
    assert len(Select(browser.find_element(By.ID, "layer")).options) == layers
    assert len(Select(browser.find_element(By.ID, "head")).options) == heads + 1  # and the average
    average = heatmap_cells(browser)
    Select(browser.find_element(By.ID, "layer")).select_by_value("0")
    Select(browser.find_element(By.ID, "head")).select_by_value("1")
    one_head = heatmap_cells(browser)
    assert len(one_head) == len(average) and one_head != average
    Select(browser.find_element(By.ID, "kind")).select_by_value("encoder")
    assert len(browser.find_elements(By.CSS_SELECTOR, ROWS)) == len(expected.sentences[0].source_pieces)
    Select(browser.find_element(By.ID, "kind")).select_by_value("cross")

    # Hovering a target piece lights up the source pieces it attends to.
    ActionChains(browser).move_to_element(browser.find_element(By.CSS_SELECTOR, f"{ROWS} th")).perform()
    assert browser.find_elements(By.CSS_SELECTOR, "#heatmap thead th.active")

    # Korean is drawn with the font the server sends, not whatever the system has.
    fonts_loaded = browser.execute_async_script(
        "const done = arguments[0]; document.fonts.ready.then(() => done("
        "[...document.fonts].filter((f) => f.family.includes('NanumGothic')).map((f) => f.status)));")
    assert fonts_loaded == ["loaded"]
    source_header = browser.find_element(By.CSS_SELECTOR, "#heatmap thead th[data-column='1']")
    assert "NanumGothic" in source_header.value_of_css_property("font-family")

    screenshot = tmp_path / "web-page.png"
    assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 10_000
    if os.environ.get("KOTRANS_SCREENSHOT"):
        Select(browser.find_element(By.ID, "layer")).select_by_index(layers - 1)
        Select(browser.find_element(By.ID, "head")).select_by_value("mean")
        ActionChains(browser).move_to_element(browser.find_element(By.CSS_SELECTOR, f"{ROWS} th")).perform()
        browser.save_screenshot(str(Path(os.environ["KOTRANS_SCREENSHOT"])))


def test_unticking_rerank_asks_for_the_beams_own_choice(server, browser):
    """The box left ticked keeps the model's reranking weight; unticked, the request sets it to 0."""
    wait = WebDriverWait(browser, TIMEOUT)
    browser.get(f"http://127.0.0.1:{server.server.http.port}/")
    wait.until(lambda b: b.find_element(By.ID, "target-lang").get_attribute("value") == "en")
    browser.execute_script(
        "window.sent = []; const fetched = window.fetch;"
        "window.fetch = (path, init) => { if (init && init.body) window.sent.push(JSON.parse(init.body)); return fetched(path, init); };")
    Select(browser.find_element(By.ID, "source-lang")).select_by_value("ko")
    browser.find_element(By.CSS_SELECTOR, "[data-testid=text]").send_keys(TEXT)
    for tick in (False, True):
        if tick:
            browser.find_element(By.CSS_SELECTOR, "[data-testid=rerank]").click()
        browser.find_element(By.CSS_SELECTOR, "[data-testid=translate]").click()
        wait.until(lambda b: len(b.execute_script("return window.sent")) == (4 if tick else 2))  # translate, explain
    sent = [request["options"] for request in browser.execute_script("return window.sent")]
    assert [options.get("reconstruction_weight") for options in sent] == [None, None, 0, 0]
    assert browser.find_element(By.CSS_SELECTOR, "[data-testid=translation]").text
