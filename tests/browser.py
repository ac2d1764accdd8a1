"""Headless Chromium through Selenium, with Debian's `chromium` and `chromium-driver` only.

Used by tests/test_report_browser.py and bench/report_bench.py. Selenium Manager never runs
(it would download a browser and a driver): the driver is given by path in `Service` and the
browser by `binary_location`, so nothing is fetched. `R2MED_CHROMIUM` and `R2MED_CHROMEDRIVER`
name other binaries. Where either is missing, `find_chromium(install=True)` tries Debian's
packages once (`apt-get install -y`, then `apt-get update` and again; `sudo -n` when not root),
as `.ci/run` does, and otherwise says in one line why there is no browser.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from typing import Any

PACKAGES = ("chromium", "chromium-driver")  # Debian's names
BROWSER_NAMES = ("chromium", "chromium-browser")
DRIVER_NAMES = ("chromedriver",)
WINDOW = (1280, 1000)
APT_TIMEOUT_S = 900


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
    return next((p for p in map(shutil.which, names) if p), None)


def _locate() -> tuple[str | None, str | None]:
    return _which("R2MED_CHROMIUM", BROWSER_NAMES), _which("R2MED_CHROMEDRIVER", DRIVER_NAMES)


def _apt_install() -> str:
    """Install Debian's chromium and chromium-driver; "" on success, else why not."""
    apt = shutil.which("apt-get")
    if apt is None:
        return "apt-get is not available"
    prefix: list[str] = []
    if os.geteuid() != 0:
        sudo = shutil.which("sudo")
        if sudo is None:
            return "not root and no sudo to run apt-get"
        prefix = [sudo, "-n"]  # never wait for a password
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt_get(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*prefix, apt, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=APT_TIMEOUT_S,
        )

    try:
        done = apt_get("install", "-y", *PACKAGES)
        if done.returncode != 0:
            apt_get("update")
            done = apt_get("install", "-y", *PACKAGES)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"apt-get failed ({e})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"apt-get install {' '.join(PACKAGES)} exited {done.returncode}: {last}"
    return ""


@cache
def find_chromium(install: bool = True) -> Chromium:
    """The browser and driver binaries; when missing and ``install``, Debian's packages first."""
    browser, driver = _locate()
    if browser and driver:
        return Chromium(browser, driver)
    missing = " and ".join(
        what for what, path in (("chromium", browser), ("chromedriver", driver)) if not path
    )
    if not install:
        return Chromium(browser, driver, f"{missing} not found")
    problem = _apt_install()
    browser, driver = _locate()
    if browser and driver:
        return Chromium(browser, driver)
    why = problem or "installed, yet still not on PATH"
    return Chromium(browser, driver, f"{missing} not found and could not be installed: {why}")


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
