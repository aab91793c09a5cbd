"""The console's fixtures: `earmark console` serving on 127.0.0.1:0 against a live sidecar,
and Debian's chromium, headless, driven through its chromedriver by Selenium. Selenium's
calls block, so a test makes them through Browser, which runs each in a thread while the
event loop serves the sidecar and the console."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from earmark.console.app import serving
from earmark.console.settings import ConsoleSettings
from tests.conftest import Running
from tests.helpers import binary_missing, eventually

T = TypeVar("T")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# The flags the machine's notes give for a headless chromium with no network but loopback.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
)
# Where the tests save their screenshots (also under each test's tmp_path).
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"


@dataclass
class Console:
    url: str
    settings: ConsoleSettings


def console_settings(sidecar: Running, **overrides: Any) -> ConsoleSettings:
    values: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "target": sidecar.target,
        "admin_target": sidecar.admin_target,
        # The Lab's steps take 50 ms here: a person's 250 ms would only slow the suite.
        "lab_step_seconds": 0.05,
    }
    values.update(overrides)
    return ConsoleSettings(**values)


@pytest.fixture
async def console(sidecar: Running) -> AsyncIterator[Console]:
    """The console against the sidecar, on a free port of 127.0.0.1."""
    settings = console_settings(sidecar)
    async with serving(settings) as (_, url):
        yield Console(url, settings)


class Browser:
    """A headless chromium: every Selenium call runs in a thread (they block)."""

    def __init__(self, driver: webdriver.Chrome) -> None:
        self.driver = driver

    async def run(self, call: Callable[[webdriver.Chrome], T]) -> T:
        return await asyncio.to_thread(call, self.driver)

    async def open(self, url: str) -> None:
        await self.run(lambda d: d.get(url))

    async def find(self, css: str) -> WebElement:
        return await self.run(lambda d: d.find_element(By.CSS_SELECTOR, css))

    async def text(self, css: str) -> str:
        return await self.run(lambda d: d.find_element(By.CSS_SELECTOR, css).text)

    async def click(self, css: str) -> None:
        await self.run(lambda d: d.find_element(By.CSS_SELECTOR, css).click())

    async def type(self, css: str, text: str) -> None:
        def typing(d: webdriver.Chrome) -> None:
            field = d.find_element(By.CSS_SELECTOR, css)
            field.clear()
            field.send_keys(text)

        await self.run(typing)

    async def wait_text(self, css: str, wanted: Callable[[str], bool], what: str) -> str:
        """The element's text once wanted(text) holds (polled, with a deadline)."""
        seen = ""

        async def check() -> bool:
            nonlocal seen
            try:
                seen = await self.text(css)
            except WebDriverException:
                return False
            return wanted(seen)

        await eventually(check, within_seconds=15, what=f"{what} (last seen {seen!r})")
        return seen

    async def errors(self) -> list[dict[str, Any]]:
        """What the page logged at SEVERE since the last call (errors, failed loads)."""
        entries = await self.run(lambda d: d.get_log("browser"))  # type: ignore[no-untyped-call]
        return [e for e in entries if e.get("level") == "SEVERE"]

    async def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        await self.run(lambda d: d.save_screenshot(str(path)))


@pytest.fixture(scope="module")
def chromium() -> Iterator[webdriver.Chrome]:
    """One chromium for a test module, with a profile of its own, quit at the end."""
    why = binary_missing("chromium", "chromium") or binary_missing(
        "chromedriver", "chromium-driver"
    )
    if why:
        pytest.skip(why)
    profile = tempfile.mkdtemp(prefix="em-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def browser(chromium: webdriver.Chrome) -> Iterator[Browser]:
    """The module's chromium with no cookies left from another test."""
    chromium.delete_all_cookies()
    yield Browser(chromium)
    chromium.get("about:blank")
