"""Headless Chromium for every browser test, found and launched in one place: Debian's
``chromium`` (``make system-deps`` installs it) driven by playwright (no browser download), or
run as a command for a screenshot of a file (:func:`screenshot_file`), with the flags that work
as root. A pytest plugin (``tests/conftest.py`` names it): the fixture
``chromium`` gives a launched browser to a plain test, ``async_chromium`` to an asyncio one (the
sync API cannot run inside a running event loop); both close it after the test.

Beside them: the window the pages are checked at, the folder screenshots go to (git-ignored, so
a checkout stays clean after the tests), a route that refuses every request off loopback, and
the check that elements fit the window.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from .support import ROOT

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package
FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
ARTIFACTS = ROOT / "test-artifacts"  # in .gitignore
VIEWPORT = {"width": 1280, "height": 800}
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def _launch_options() -> dict[str, Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make system-deps` installs it (apt package chromium)")
    return {
        "executable_path": str(CHROMIUM),
        "headless": True,
        "args": list(FLAGS),
        "chromium_sandbox": False,
    }


@pytest.fixture
def chromium() -> Iterator[Any]:
    """A launched headless Chromium (playwright's sync ``Browser``)."""
    from playwright.sync_api import sync_playwright

    options = _launch_options()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(**options)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
async def async_chromium() -> AsyncIterator[Any]:
    """A launched headless Chromium (playwright's async ``Browser``), for asyncio tests."""
    from playwright.async_api import async_playwright

    options = _launch_options()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**options)
        try:
            yield browser
        finally:
            await browser.close()


def artifact(name: str) -> Path:
    """Where a test's output ``name`` (a screenshot) goes: the ignored ``test-artifacts/``."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


def block_the_internet(context: Any) -> list[str]:
    """Abort every request to a host that is not loopback; the list collects their URLs."""
    refused: list[str] = []

    def handle(route: Any) -> None:
        url = route.request.url
        if urlsplit(url).hostname in LOOPBACK or not url.startswith("http"):
            route.continue_()
        else:
            refused.append(url)
            route.abort("blockedbyclient")

    context.route("**/*", handle)
    return refused


def assert_within_the_window(page: Any, selector: str) -> int:
    """Every element ``selector`` finds ends inside the window's width; returns how many."""
    boxes = [el.bounding_box() for el in page.locator(selector).all()]
    assert boxes and all(b is not None for b in boxes), selector
    right = max(b["x"] + b["width"] for b in boxes)
    assert right <= VIEWPORT["width"], f"{selector} reaches {right}px"
    return len(boxes)


def screenshot_file(page: Path, png: Path, size: str = "1280,800") -> None:
    """The local HTML file ``page`` as ``png`` at ``size``, by the chromium command itself."""
    executable = _launch_options()["executable_path"]
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                executable,
                "--headless",
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                f"--window-size={size}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
