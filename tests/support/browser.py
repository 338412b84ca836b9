"""A real browser for the inspector's tests: Debian's headless Chromium driven by Selenium
through Debian's chromedriver (nothing downloaded), the app served by uvicorn in a thread on
a loopback port, and screenshots kept under ``test-artifacts/ui/`` (git-ignored)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import free_port

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
STARTUP_TIMEOUT_S = 30.0
MISSING = (
    "the browser tests need Debian's chromium and chromium-driver ({missing} is missing): "
    "`make install` installs them as root (apt-get install -y chromium chromium-driver)"
)


def open_chromium(width: int = 1280, height: int = 900) -> Any:
    """A headless Chromium under Selenium; a clear failure (not a skip) when it is missing."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            pytest.fail(MISSING.format(missing=path), pytrace=False)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("the browser tests need selenium: `make install` (dev extra)", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


@contextmanager
def live_app(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on a free loopback port; yields its base URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="ui-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the app did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def screenshot(driver: Any, name: str) -> Path:
    """The whole page as it looks now (the window stretched to its height, then put back),
    kept as a test artifact."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    size = driver.get_window_size()
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(size["width"], min(max(size["height"], height + 150), 4000))
    try:
        driver.save_screenshot(str(path))
    finally:
        driver.set_window_size(size["width"], size["height"])
    return path
