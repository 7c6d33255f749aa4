"""Fixtures of the console's browser tests: one seeded ``blackops serve`` and one headless
Chromium per module (the system's, launched by Playwright: nothing is downloaded)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from console_world import CHROMIUM, World, console_world, need_browser


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    need_browser()
    with console_world(tmp_path_factory.mktemp("console")) as found:
        yield found


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield browser
        finally:
            browser.close()
