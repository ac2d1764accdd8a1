"""Headless Chromium through Selenium, with Debian's `chromium` and `chromium-driver` only.

Used by tests/eval/compare/test_html_report_browser.py and bench/report_bench.py. Selenium Manager
never runs (it would download a browser and a driver): the driver is given by path in `Service` and
the browser by `binary_location`, so nothing is fetched. Nothing is installed here either: `.ci/run`
installs Debian's packages; here the binaries are looked up on PATH, then in /usr/bin.
`R2MED_CHROMIUM` and `R2MED_CHROMEDRIVER` name other binaries. Where either is missing,
`find_chromium` says in one line which, and how to get it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGES = ("chromium", "chromium-driver")  # Debian's names
BROWSER_NAMES = ("chromium", "chromium-browser")
DRIVER_NAMES = ("chromedriver",)
FALLBACK_DIR = Path("/usr/bin")  # where Debian's packages put them, should PATH not hold it
WINDOW = (1280, 1000)


@dataclass(frozen=True)
class Chromium:
    browser: str | None
    driver: str | None
    reason: str = ""  # why one is missing; "" when both were found

    @property
    def ok(self) -> bool:
        return bool(self.browser and self.driver)


def _which(env: str, names: tuple[str, ...]) -> str | None:
    if os.environ.get(env):
        return shutil.which(os.environ[env])
    for name in names:
        found = shutil.which(name) or shutil.which(name, path=str(FALLBACK_DIR))
        if found:
            return found
    return None


def find_chromium(install: bool = False) -> Chromium:
    """The browser and driver binaries, or which is missing (``reason``).

    ``install`` is only there for callers written when this could install the packages; it
    must be False: tests never install system packages (`.ci/run` does).
    """
    if install:
        raise ValueError("tests/browser.py installs nothing; .ci/run installs Debian's chromium")
    browser = _which("R2MED_CHROMIUM", BROWSER_NAMES)
    driver = _which("R2MED_CHROMEDRIVER", DRIVER_NAMES)
    if browser and driver:
        return Chromium(browser, driver)
    missing = [
        what
        for what, env, path in (
            ("chromium", "R2MED_CHROMIUM", browser),
            ("chromedriver", "R2MED_CHROMEDRIVER", driver),
        )
        if not path
    ]
    named = [f"{os.environ[env]} (${env})" for env in ("R2MED_CHROMIUM", "R2MED_CHROMEDRIVER")
             if os.environ.get(env)]  # fmt: skip
    where = f"{', '.join(named)} not found; " if named else ""
    return Chromium(
        browser,
        driver,
        f"{' and '.join(missing)} not found on PATH or in {FALLBACK_DIR} ({where}Debian: "
        f"apt-get install {' '.join(PACKAGES)}, which .ci/run does)",
    )


def start_chromium(chromium: Chromium, window: tuple[int, int] = WINDOW) -> Any:
    """A headless Chromium WebDriver that logs the page's network requests and console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not chromium.ok:
        raise RuntimeError(chromium.reason)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium.browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        f"--window-size={window[0]},{window[1]}",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-sync",
        "--hide-scrollbars",
        "--enable-precise-memory-info",  # performance.memory unrounded and not cached
    ):
        options.add_argument(arg)
    # Network.* events (every request the page makes) and console messages, read back with
    # driver.get_log("performance") / get_log("browser").
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=chromium.driver), options=options)
