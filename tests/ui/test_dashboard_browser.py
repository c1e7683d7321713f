"""The dashboard in a real headless Chromium against a live routefit (in-process) with eight
routes: the sign-in, the live figures, the layout at 1024 and 1920 px, the operating panels (in
this order: the last one adds deployment series to the app's metrics).

Chromium is the Debian package ``chromium`` driven by playwright-python (never ``playwright
install``). Without it the test is skipped with the reason — except in CI (``CI`` set), where a
missing browser is a failure: ``.ci/run`` installs it.

Screenshots go to tests/artifacts/dashboard-1024.png and dashboard-1920.png (gitignored);
docs/dashboard-1024.png and docs/dashboard-1920.png are copies of a run's.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ADMIN_KEY, TEAM_KEY, Traffic, _drive, _local
from harness import gateway_config
from inprocess import run_inprocess
from openai import OpenAI
from prometheus_client import Counter, Histogram

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
OTHER_KEY = "team-ads-ui-test-key"
UNSET = "ROUTEFIT_UI_BROWSER_UNSET_KEY"
#: The widths the page must be usable at.
WIDTHS = (1024, 1920)
#: The issue's measure of the old page: eight routes made it 6,761 px tall at 1024 px.
OLD_HEIGHT = 6761


def _chromium() -> str:
    path = os.environ.get("ROUTEFIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        reason = "Debian package chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must install it")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def eight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traffic]:
    """Eight routes: conftest's three (calibration, anchors, fitting, streaming), four more
    simulated ones, and one whose provider key variable is unset; two teams; errors of
    several kinds, one of them a refusal while fitting."""
    assert UNSET not in os.environ
    path = tmp_path_factory.mktemp("ui8") / "routefit.yaml"
    keyless = {
        "model_name": "prod-gpt-4o",
        "litellm_params": {
            "model": "openai/gpt-4o",
            "api_base": "http://127.0.0.1:9/v1",
            "api_key": f"os.environ/{UNSET}",
        },
    }
    routes = [
        _local("sim-gpt-4o", "gpt-4o"),
        _local("sim-mystery", "mystery-1", max_input_tokens=32768, max_output_tokens=4096),
        _local("sim-small", "gpt-4o-small", max_input_tokens=8192, max_output_tokens=4096),
        _local("sim-mini", "gpt-4o-mini"),
        _local("sim-gpt-4", "gpt-4"),
        _local("sim-mystery-2", "mystery-2", max_input_tokens=32768, max_output_tokens=4096),
        _local("sim-gpt-4o-eu", "gpt-4o"),
        keyless,
    ]
    teams = [
        {
            "id": "search",
            "keys": [TEAM_KEY],
            "quotas": {"tokens_per_minute": 400_000, "tokens_per_day": 2_000_000},
        },
        {"id": "ads", "keys": [OTHER_KEY], "quotas": {"usd_per_month": 5}},
    ]
    gateway_config(path, routes, admin_key=ADMIN_KEY, teams=teams)
    with run_inprocess(Path(path)) as gateway:
        sent = _drive(OpenAI(base_url=gateway.v1, api_key=TEAM_KEY, max_retries=0))
        ads = OpenAI(base_url=gateway.v1, api_key=OTHER_KEY, max_retries=0)
        for alias in ("sim-mini", "sim-gpt-4", "sim-mystery-2", "sim-gpt-4o-eu"):
            ads.chat.completions.create(
                model=alias, messages=[{"role": "user", "content": "hello " * 300}]
            )
            sent[alias] = 1
        headers = {"authorization": f"Bearer {OTHER_KEY}"}
        for model, text, status in (
            ("sim-small", "word " * 12000, 400),  # larger than the window: refused
            ("prod-gpt-4o", "hi", 503),  # its key variable is unset
            ("no-such-route", "hi", 404),
        ):
            body = {"model": model, "messages": [{"role": "user", "content": text}]}
            response = httpx.post(gateway.v1 + "/chat/completions", json=body, headers=headers)
            assert response.status_code == status, response.text
        yield Traffic(gateway, sent)


def _problems(page: Any) -> list[str]:
    problems: list[str] = []
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
    return problems


def _sign_in(page: Any, base: str, problems: list[str]) -> None:
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


def _figure(page: Any, route: str, name: str) -> str:
    text: str = page.locator(f'#routes [data-route="{route}"] [data-figure="{name}"]').inner_text()
    return text


def test_dashboard_shows_live_figures_without_console_errors(eight: Traffic) -> None:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    base = eight.gateway.base_url
    data = httpx.get(
        base + "/routefit/ui/data", headers={"authorization": f"Bearer {ADMIN_KEY}"}
    ).json()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            problems = _problems(page)
            _sign_in(page, base, problems)

            for alias, count in eight.sent.items():
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

            page.click("#logout")
            page.wait_for_selector("#login:not([hidden])")
        finally:
            browser.close()
    assert problems == []


def _declared(registry: Any, kind: Any, name: str, labels: list[str]) -> Any:
    """The series ``name`` in ``registry``: declared here, or the gateway's own where it
    declares it (a gateway that routes between deployments does)."""
    try:
        return kind(name, name, labels, registry=registry)
    except ValueError:  # already declared
        return registry._names_to_collectors[name]


def _export_deployment_series(traffic: Traffic, data: dict[str, Any]) -> str:
    """Per-deployment series as a routing gateway exports them, in the live app's registry, for
    the keyless route's deployment (refused before anything leaves, so no gateway counts an
    attempt of its own there): nine attempts answered, one timed out, 0.25 s each."""
    registry = traffic.gateway.app.state.routefit.metrics.registry
    (route,) = [r for r in data["deployments"]["routes"] if r["alias"] == "prod-gpt-4o"]
    deployment: str = route["deployments"][0]["id"]
    attempts = _declared(
        registry, Counter, "routefit_deployment_attempts", ["route", "deployment", "outcome"]
    )
    latency = _declared(
        registry, Histogram, "routefit_deployment_latency_seconds", ["route", "deployment"]
    )
    attempts.labels("prod-gpt-4o", deployment, "ok").inc(9)
    attempts.labels("prod-gpt-4o", deployment, "timeout").inc(1)
    for _ in range(10):
        latency.labels("prod-gpt-4o", deployment).observe(0.25)
    return deployment


def _layout(page: Any) -> dict[str, Any]:
    layout: dict[str, Any] = page.evaluate(
        """() => {
          const box = (e) => {
            const r = e.getBoundingClientRect();
            return {left: r.left, right: r.right, top: r.top + scrollY, width: r.width,
                    height: r.height};
          };
          const doc = document.documentElement;
          return {
            scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth, height: doc.scrollHeight,
            panels: Object.fromEntries([...document.querySelectorAll("[data-panel]")]
              .map((p) => [p.dataset.panel, box(p)])),
            sideways: [...document.querySelectorAll(".scroll")]
              .filter((s) => s.scrollWidth > s.clientWidth + 1)
              .map((s) => s.closest("[data-panel]").dataset.panel),
            cards: [...document.querySelectorAll("#routes .card")].map(box),
          };
        }"""
    )
    return layout


def test_the_page_is_usable_from_1024_to_1920_px(eight: Traffic) -> None:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    base = eight.gateway.base_url
    heights: dict[int, int] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTHS[0], "height": 900})
            problems = _problems(page)
            _sign_in(page, base, problems)
            ARTIFACTS.mkdir(exist_ok=True)
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 900})
                assert page.evaluate("() => document.documentElement.clientWidth") == width
                layout = _layout(page)
                heights[width] = layout["height"]
                page.screenshot(path=str(ARTIFACTS / f"dashboard-{width}.png"), full_page=True)
                # nothing wider than the window: no sideways scrolling, of the page or a table
                assert layout["scrollWidth"] <= layout["clientWidth"], layout
                assert layout["sideways"] == [], layout["sideways"]
                panels = layout["panels"]
                assert len(panels) == 8
                for name, box in panels.items():
                    assert box["width"] >= 400 and box["height"] > 40, (width, name, box)
                    assert box["left"] >= 0 and box["right"] <= width, (width, name, box)
                # panels share rows: the width is used, not one column of everything
                rows = {round(b["top"]) for b in panels.values()}
                assert len(rows) <= len(panels) - 2, (width, panels)
                cards = layout["cards"]
                assert len(cards) == 8
                tops = [round(c["top"]) for c in cards]
                per_row = max(tops.count(top) for top in tops)
                assert per_row >= (2 if width < 1500 else 4), (width, cards)
                assert all(c["width"] >= 400 for c in cards)
        finally:
            browser.close()
    print(f"page height with 8 routes: {heights}")
    # the 6,761 px page at 1024, and wider is not taller
    assert heights[1024] < OLD_HEIGHT / 2, heights
    assert heights[1920] <= heights[1024], heights
    assert problems == []


def test_operating_panels_show_spend_errors_keys_and_the_request_log(eight: Traffic) -> None:
    executable = _chromium()
    from playwright.sync_api import expect, sync_playwright

    base = eight.gateway.base_url
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    data = httpx.get(base + "/routefit/ui/data", headers=admin).json()
    deployment = _export_deployment_series(eight, data)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1024, "height": 900})
            problems = _problems(page)
            _sign_in(page, base, problems)
            # the route without its key: flagged in the header and on its row
            assert page.locator('[data-pill="keyless"]').inner_text().endswith("1")
            badge = page.locator('#deployments [data-route="prod-gpt-4o"] [data-figure="key"]')
            assert badge.inner_text() == f"MISSING: {UNSET} unset"
            assert "bad" in (badge.get_attribute("class") or "")
            health = page.locator('#deployments [data-figure="health"]')
            assert health.count() == 8  # one deployment per alias, each listed
            # the deployment series, where the gateway exports them, fill its row
            row = page.locator(f'#deployments tr[data-deployment="{deployment}"]')
            assert row.locator('[data-figure="health"]').inner_text() == "degraded"
            assert "timeout 1" in row.inner_text() and "250 ms" in row.inner_text()
            # errors by status and route: the refusal on its own route, the unknown model apart
            small = page.locator('#errors [data-route="sim-small"] [data-status="400"]')
            assert small.inner_text() == "1"
            keyless = page.locator('#errors [data-route="prod-gpt-4o"] [data-status="503"]')
            assert keyless.inner_text() == "1"
            assert page.locator('#errors [data-route="-"] [data-status="404"]').inner_text() == "1"
            # spend: one bar series per team that spent, the table per key
            spent = [t for t in data["spend"]["teams"] if t["usd"] > 0]
            assert spent and page.locator("#spend-chart rect").count() >= len(spent)
            assert page.locator("#keys tbody tr").count() == len(data["spend"]["keys"])
            page.select_option("#spend-by", "keys")
            assert page.locator("#spend-chart .legend span").count() == len(
                [k for k in data["spend"]["keys"] if k["usd"] > 0]
            )
            # the request log: every record, then the one a click on the 400 count selects
            log = httpx.get(base + "/routefit/requests", headers=admin).json()["data"]
            assert page.locator("#log tbody tr").count() == len(log)
            small.locator("button").click()
            expect(page.locator("#log tbody tr")).to_have_count(1)
            row = page.locator("#log tbody tr")
            assert row.get_attribute("data-route") == "sim-small"
            assert "context_length_exceeded" in row.inner_text()
            page.click("#log-filters button[type=reset]")
            expect(page.locator("#log tbody tr")).to_have_count(len(log))
            page.select_option('#log-filters select[name="team"]', "search")
            searched = len([r for r in log if r["team"] == "search"])
            expect(page.locator("#log tbody tr")).to_have_count(searched)
        finally:
            browser.close()
    assert problems == []
