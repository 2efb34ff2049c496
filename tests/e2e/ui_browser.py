"""Headless Chromium for the UI tests: Debian's ``chromium`` and ``chromium-driver`` (installed
by scripts/setup.sh) driven through Selenium. The driver's path is given to Selenium's
``Service``, so Selenium Manager never runs (it would download a driver); browser and driver
come from one Debian package version, so they always match.

Every step can be saved as a numbered screenshot (``Browser.shot``) in the test's output
directory; on failure the test saves the page too (``Browser.save_page``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    ElementNotInteractableException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

T = TypeVar("T")

#: The Debian packages' executables (``chromium``, ``chromium-driver``).
CHROMIUM_NAMES = ("chromium", "chromium-browser")
CHROMEDRIVER_NAMES = ("chromedriver",)


def _which(names: tuple[str, ...]) -> str | None:
    for name in names:
        if path := shutil.which(name):
            return path
    return None


def executables() -> tuple[str, str] | str:
    """(chromium, chromedriver) paths, or a message saying which is missing."""
    chromium, driver = _which(CHROMIUM_NAMES), _which(CHROMEDRIVER_NAMES)
    if chromium and driver:
        return chromium, driver
    missing = [n for n, p in (("chromium", chromium), ("chromedriver", driver)) if not p]
    return (
        f"{' and '.join(missing)} not found on PATH: install Debian's chromium and "
        "chromium-driver (scripts/setup.sh does)"
    )


class Browser:
    """One headless Chromium window (1400x1000) with its own profile under ``profile_dir``;
    screenshots go to ``out_dir`` as ``NN-name.png``."""

    def __init__(self, chromium: str, chromedriver: str, out_dir: Path, profile_dir: Path) -> None:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for arg in (
            "--headless=new",
            "--no-sandbox",  # as root (CI) Chromium's sandbox refuses to start
            "--disable-dev-shm-usage",
            "--disable-gpu",
            "--window-size=1400,1000",
            f"--user-data-dir={profile_dir}",
        ):
            options.add_argument(arg)
        self.out_dir = out_dir
        self.driver = webdriver.Chrome(
            service=Service(executable_path=chromedriver), options=options
        )
        self.driver.set_page_load_timeout(180)  # a loaded 2-core machine
        self._count = 0

    def shot(self, name: str) -> Path:
        """Saves a screenshot of the window as the next numbered PNG; its path."""
        self._count += 1
        path = self.out_dir / f"{self._count:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def save_page(self, name: str) -> list[Path]:
        """A screenshot and the page's HTML (``name.png``, ``name.html``); the paths saved."""
        saved = []
        try:
            png = self.out_dir / f"{name}.png"
            self.driver.save_screenshot(str(png))
            saved.append(png)
            html = self.out_dir / f"{name}.html"
            html.write_text(self.driver.page_source, encoding="utf-8")
            saved.append(html)
        except WebDriverException:
            pass  # the browser itself failed: the caller's error says why
        return saved

    def wait(self, what: str, condition: Callable[[], T], timeout: float = 120) -> T:
        """Polls ``condition`` until it returns something truthy (returned); after ``timeout``
        seconds a TimeoutException naming ``what``."""
        return WebDriverWait(
            self.driver,
            timeout,
            poll_frequency=0.5,
            ignored_exceptions=(StaleElementReferenceException,),
        ).until(lambda _driver: condition(), message=f"waiting for {what}")

    def element(
        self, css: str, timeout: float = 120, within: WebElement | None = None
    ) -> WebElement:
        """The first displayed element matching ``css`` (in ``within``, else the page)."""

        def find() -> WebElement | None:
            root = within if within is not None else self.driver
            return next(
                (e for e in root.find_elements(By.CSS_SELECTOR, css) if e.is_displayed()), None
            )

        return self.wait(f"an element {css!r}", find, timeout)

    def attribute(self, css: str, name: str, timeout: float = 120) -> str | None:
        """Attribute ``name`` of the first displayed element matching ``css``, found again
        if the page re-renders it between the lookup and the read (stale)."""

        def read() -> tuple[str | None]:
            return (self.element(css, timeout=timeout).get_attribute(name),)

        return self.wait(f"attribute {name!r} of {css!r}", read, timeout)[0]

    def click(self, css: str, timeout: float = 120, within: WebElement | None = None) -> None:
        """Clicks the first displayed element matching ``css``, trying again while the page
        re-renders it (stale) or something lies over it for a moment (a toast, an animation)."""

        def click() -> bool:
            try:
                self.element(css, timeout=timeout, within=within).click()
            except (ElementClickInterceptedException, ElementNotInteractableException):
                return False
            return True

        self.wait(f"a click on {css!r} to go through", click, timeout)

    def quit(self) -> None:
        self.driver.quit()
