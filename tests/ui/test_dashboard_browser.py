"""The dashboard in a real headless Chromium against a live ``routefit serve``.

Chromium is the Debian package ``chromium`` driven by playwright-python (never ``playwright
install``). Without it the test is skipped with the reason — except in CI (``CI`` set), where a
missing browser is a failure: ``.ci/run`` installs it.

The screenshot is kept in tests/artifacts/dashboard.png (gitignored); docs/dashboard.png in the
README is a copy of one.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import httpx
import pytest
from conftest import ADMIN_KEY, Traffic

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def _chromium() -> str:
    path = os.environ.get("ROUTEFIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        reason = "Debian package chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must install it")
        pytest.skip(reason)
    return path


def _figure(page, route: str, name: str) -> str:
    text: str = page.locator(f'[data-route="{route}"] [data-figure="{name}"]').inner_text()
    return text


def test_dashboard_shows_live_figures_without_console_errors(traffic: Traffic) -> None:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    base = traffic.gateway.base_url
    data = httpx.get(
        base + "/routefit/ui/data", headers={"authorization": f"Bearer {ADMIN_KEY}"}
    ).json()
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning")
                    else None
                ),
            )
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            page.goto(base + "/routefit/ui")
            # Teams and an admin key are configured: the page asks for the key first.
            page.wait_for_selector("#login:not([hidden])")
            assert page.locator("#content").is_hidden()
            page.fill("#key", "not-the-key")
            page.click("#login-form button")
            page.wait_for_selector("#login-error:has-text('not the admin key')")
            problems[:] = [p for p in problems if "403" not in p]  # the refused POST itself
            page.fill("#key", ADMIN_KEY)
            page.click("#login-form button")
            page.wait_for_selector("body[data-loaded=true]")

            for alias, count in traffic.sent.items():
                assert _figure(page, alias, "requests") == f"{count:,}"
            routes = {r["alias"]: r for r in data["routes"]}
            samples = routes["sim-mystery"]["calibration"]["samples"]
            assert samples > 0 and _figure(page, "sim-mystery", "samples") == str(samples)
            # The mystery model counts 11% more than routefit's tokenizer: factors above 1.
            factors = page.locator('[data-route="sim-mystery"] [data-chart="calibration factors"]')
            text_factor = float(re.search(r"text (\d\.\d+)", factors.inner_text()).group(1))
            assert text_factor > 1.0
            assert factors.locator("path.line, circle").count() >= 1
            error_dots = page.locator(
                '[data-route="sim-mystery"] [data-chart="estimate error"] circle'
            )
            assert error_dots.count() == len(routes["sim-mystery"]["series"]["error"])
            anchored = _figure(page, "sim-mystery", "anchored")
            assert anchored.endswith("%") and anchored != "0.0%"
            # The small route was fitted: the chart draws its elisions, the table lists them.
            bars = page.locator('[data-route="sim-small"] [data-chart="fit actions"] rect')
            assert bars.count() >= 1
            assert page.locator("#fits tbody tr", has_text="elided").count() >= 1
            # the day window: a minute window may have rolled over since the traffic was sent
            day = '[data-team="search"] [data-window="tokens_per_day"] [data-figure="usage"]'
            usage = page.locator(day).inner_text()
            used = int(usage.split("/")[0].replace(",", ""))
            assert used > 0

            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            page.click("#logout")
            page.wait_for_selector("#login:not([hidden])")
        finally:
            browser.close()
    assert problems == []
