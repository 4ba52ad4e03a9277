"""The dashboard in a real browser: Debian's headless chromium, driven by Selenium.

A real uvicorn server on 127.0.0.1 runs the sensor agent on a deterministic model with
small delays. The browser signs in with a key, starts a run, watches the chart grow
step by step, approves the handover the run freezes on, and sees the run finish.
Screenshots (light and dark) go to tests/server/artifacts/ (ignored by git).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from closedloop.feedback import SQLiteStore
from closedloop.server import ApiKeys, ServerSettings, create_app

from .conftest import LiveServer, RoutingModel, make_registry

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).with_name("artifacts")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,950",
)

pytestmark = pytest.mark.integration


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("chromium and chromedriver are missing: run scripts/install_system_deps.sh")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must never download
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _key(db: Path) -> str:
    async def create() -> str:
        store = SQLiteStore(db)
        try:
            return (await ApiKeys(store).create("reviewer")).token
        finally:
            await store.close()

    return asyncio.run(create())


def _luminance(path: Path, xy: tuple[int, int]) -> float:
    from PIL import Image

    with Image.open(path) as image:
        r, g, b = image.convert("RGB").getpixel(xy)  # type: ignore[misc]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_the_dashboard_follows_a_live_run_and_approves_its_handover(
    tmp_path: Path,
    browser: object,
    live_server_factory: Callable[[FastAPI], LiveServer],
) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = browser
    assert isinstance(driver, WebDriver)
    db = tmp_path / "state.db"
    key = _key(db)
    app = create_app(
        ServerSettings(
            store=f"sqlite://{db}",
            model=RoutingModel(delay_s=0.25),  # the model's latency: the chart has time to grow
            registry=make_registry(),
            runs_dir=tmp_path / "runs",
            gc_interval_s=None,
        )
    )
    live = live_server_factory(app)
    # The page re-renders its lists as data arrives: an element found a moment ago may be
    # replaced, so every wait looks again instead of failing on a stale reference.
    wait = WebDriverWait(
        driver, 30, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    )

    driver.get(live.base_url + "/")
    wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
    driver.find_element(By.ID, "api-key").send_keys(key)
    driver.find_element(By.ID, "login-button").click()
    wait.until(lambda d: d.find_element(By.ID, "app").is_displayed())
    assert key not in driver.current_url
    stored = driver.execute_script("return sessionStorage.getItem('closedloop.apiKey')")
    # A request failing right after sign-in signs the page out again; its message says which.
    signed_out = driver.find_element(By.ID, "login-error").text
    assert stored == key, f"signed out after sign-in: {signed_out!r}"
    assert "reviewer" in driver.find_element(By.ID, "who-name").text

    wait.until(lambda d: len(Select(d.find_element(By.ID, "agent")).options) == 2)
    Select(driver.find_element(By.ID, "agent")).select_by_value("sensor")
    driver.find_element(By.ID, "task").send_keys("Read the sensor samples 0 to 7, then report.")
    driver.find_element(By.CSS_SELECTOR, "#new-run button[type=submit]").click()

    chart = driver.find_element(By.ID, "chart")

    def points() -> int:
        return int(chart.get_attribute("data-points") or "0")

    # The chart grows while the run is running: seen at two moments, with more points later.
    wait.until(lambda d: points() >= 2)
    early = points()
    wait.until(lambda d: points() >= early + 2)
    later = points()
    assert later > early
    run_id = wait.until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#runs-table tbody tr.selected").get_attribute(
            "data-run-id"
        )
    )
    assert run_id and run_id.startswith("run_")

    wait.until(lambda d: points() >= 5)
    ARTIFACTS.mkdir(exist_ok=True)
    light = ARTIFACTS / "dashboard-light.png"
    driver.save_screenshot(str(light))

    # The run freezes for a person: it shows up in the queue with its audit.
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#ho-list li[data-handover-id]"))
    assert chart.get_attribute("data-last-protocol") in ("manual_handover", "dimension_reduction")
    frozen_points = wait.until(lambda d: points() if points() == 7 else None)

    def open_item(d: WebDriver) -> bool:
        d.find_element(By.CSS_SELECTOR, "#ho-list li[data-handover-id]").click()
        return True

    wait.until(open_item)
    wait.until(lambda d: d.find_element(By.ID, "ho-detail").is_displayed())
    wait.until(lambda d: "probe" in d.find_element(By.ID, "ho-action").text)
    assert '"sample": 6' in driver.find_element(By.ID, "ho-args").get_attribute("value")
    assert driver.find_elements(By.CSS_SELECTOR, "#ho-observed li")
    driver.find_element(By.ID, "ho-note").send_keys("checked the wiring")
    driver.find_element(By.ID, "ho-approve").click()
    wait.until(lambda d: "approved" in d.find_element(By.ID, "ho-message").text)
    assert "approved" in driver.find_element(By.ID, "ho-reason").text
    assert not driver.find_element(By.ID, "ho-approve").is_enabled()

    # The decision resumes the task where it froze, and the chart follows it to the end.
    wait.until(lambda d: points() == 9)
    assert frozen_points == 7
    wait.until(
        lambda d: (
            "done · final"
            in d.find_element(By.CSS_SELECTOR, f'#runs-table tr[data-run-id="{run_id}"]').text
        )
    )
    wait.until(lambda d: "eight samples read" in d.find_element(By.ID, "run-answer").text)
    wait.until(lambda d: d.find_element(By.ID, "ho-count").text == "0")

    headers = {"Authorization": f"Bearer {key}"}
    runs = httpx.get(f"{live.base_url}/v1/runs", headers=headers, timeout=10).json()["runs"]
    (run,) = [r for r in runs if r["id"] == run_id]
    assert run["status"] == "done" and run["success"] is True and run["steps"] == 9
    handovers = httpx.get(
        f"{live.base_url}/v1/handovers", params={"all": "true"}, headers=headers, timeout=10
    ).json()["handovers"]
    assert [(h["status"], h["decided_by"], h["note"]) for h in handovers] == [
        ("approved", "reviewer", "checked the wiring")
    ]

    driver.execute_cdp_cmd(  # type: ignore[attr-defined]
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    driver.set_window_size(1401, 950)  # a resize redraws the canvas in the new colours
    driver.execute_script("window.scrollTo(0, 0)")
    wait.until(lambda d: d.execute_script(
        "return matchMedia('(prefers-color-scheme: dark)').matches"
    ))  # fmt: skip
    dark = ARTIFACTS / "dashboard-dark.png"
    driver.save_screenshot(str(dark))

    size = driver.get_window_size()
    corner = (20, size["height"] - 200)
    assert _luminance(light, corner) > 200  # light page background
    assert _luminance(dark, corner) < 60  # dark page background
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]  # type: ignore[attr-defined]
    assert severe == [], severe
    shutil.copy(light, tmp_path / light.name)  # kept beside the test's other files too
