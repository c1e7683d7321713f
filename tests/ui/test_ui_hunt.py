"""The dashboard's surface against a hostile web page and a hostile tenant: another site's page
cannot spend the operator's admin-key throttle through the sign-in, every dashboard answer
forbids framing and sniffing, and the page writes what tenants name as text only.

Served in process (``inprocess.asgi_client``): the provider answers one fixed completion, since
only what the dashboard answers matters here.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from inprocess import asgi_client

from proxy.config import parse_config

ADMIN = "admin-hunt-key"
TEAM = "team-hunt-key"
UI = "/routefit/ui"
#: A route alias a careless (or hostile) config writer could choose: markup, quotes, a script.
HOSTILE_ALIAS = "<img src=x onerror=alert(1)>\"'</script>"

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _provider(request: httpx.Request) -> httpx.Response:
    """One fixed answer: what the provider says is beside the point of these tests."""
    message = {"role": "assistant", "content": "ok"}
    return httpx.Response(
        200,
        json={
            "id": "c1",
            "object": "chat.completion",
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
        },
    )


@pytest.fixture
async def ui() -> AsyncIterator[httpx.AsyncClient]:
    data = {
        "model_list": [
            {
                "model_name": HOSTILE_ALIAS,
                "litellm_params": {
                    "model": "openai/gpt-4o",
                    "api_key": "sk-hunt",
                    "api_base": "http://provider.test/v1",
                },
            }
        ],
        "routefit_settings": {
            "store_path": ":memory:",
            "admin_key": ADMIN,
            "teams": [{"id": "alpha", "keys": [TEAM]}],
        },
    }
    async with asgi_client(parse_config(data, "hunt.yaml", environ={}), _provider) as client:
        yield client


def _guess(i: int) -> bytes:
    return orjson.dumps({"key": f"wrong-{i}"})


#: What another site's page can send to ``POST /routefit/ui/session`` without a CORS
#: preflight (a text/plain body, a form, a typeless blob), and a JSON one a browser says is
#: cross-site or from a sibling subdomain.
FORGED = [
    {"content-type": "text/plain;charset=UTF-8", "origin": "https://evil.example"},
    {"content-type": "application/x-www-form-urlencoded", "origin": "https://evil.example"},
    {"origin": "https://evil.example"},
    {"content-type": "application/json", "sec-fetch-site": "cross-site"},
    {"content-type": "application/json", "sec-fetch-site": "same-site"},
]


async def test_another_sites_page_cannot_lock_the_operator_out(ui: httpx.AsyncClient) -> None:
    """Wrong keys posted by a hostile page the operator visits: without the check, each was a
    failed admin-key guess of the operator's address, and the seventh locked every admin door
    (the admin's own bearer request answered 429 for seconds to 15 minutes)."""
    for i in range(4):
        for headers in FORGED:
            r = await ui.post(UI + "/session", content=_guess(i), headers=headers)
            assert r.status_code in (400, 403), (headers, r.status_code, r.text)
            assert "set-cookie" not in r.headers
    # the real key, sent the forged ways, opens nothing either
    for headers in FORGED:
        r = await ui.post(UI + "/session", content=orjson.dumps({"key": ADMIN}), headers=headers)
        assert r.status_code in (400, 403) and "set-cookie" not in r.headers, headers
    admin = await ui.get(UI + "/data", headers={"authorization": f"Bearer {ADMIN}"})
    assert admin.status_code == 200, admin.text
    calibration = await ui.get(
        "/routefit/calibration", headers={"authorization": f"Bearer {ADMIN}"}
    )
    assert calibration.status_code == 200


async def test_the_pages_own_sign_in_and_a_scripts_still_work(ui: httpx.AsyncClient) -> None:
    """The page's fetch (JSON, ``Sec-Fetch-Site: same-origin``) and a script's (JSON, no fetch
    metadata) each get a session; wrong keys sent that way still count as guesses."""
    for site in ({"sec-fetch-site": "same-origin"}, {}):
        r = await ui.post(UI + "/session", json={"key": ADMIN}, headers=site)
        assert r.status_code == 204, r.text
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
        ui.cookies.clear()
    statuses = [
        (await ui.post(UI + "/session", json={"key": f"guess-{i}"})).status_code for i in range(8)
    ]
    assert statuses[:5] == [403] * 5 and statuses[-1] == 429, statuses


def _dashboard_requests() -> list[tuple[str, str, dict[str, str], bytes | None]]:
    """(method, path, headers, body): every kind of answer the dashboard gives, ok or not."""
    bearer = {"authorization": f"Bearer {ADMIN}"}
    return [
        ("GET", UI, {}, None),
        ("GET", UI + "/static/dashboard.js", {}, None),
        ("GET", UI + "/static/dashboard.css", {}, None),
        ("GET", UI + "/static/missing.js", {}, None),
        ("GET", UI + "/data", {}, None),
        ("GET", UI + "/data", bearer, None),
        ("GET", UI + "/requests", bearer, None),
        ("GET", UI + "/session", {}, None),
        ("POST", UI + "/session", {"content-type": "text/plain"}, b"{}"),
        ("DELETE", UI + "/session", {}, None),
    ]


async def test_every_dashboard_answer_forbids_framing_sniffing_and_caching(
    ui: httpx.AsyncClient,
) -> None:
    """CSP ``frame-ancestors 'none'`` has an older spelling browsers without it obey
    (``X-Frame-Options``); an unknown file's 404 carried none of these headers."""
    for method, path, headers, body in _dashboard_requests():
        r = await ui.request(method, path, headers=headers, content=body)
        h = r.headers
        where = f"{method} {path} -> {r.status_code}"
        assert "frame-ancestors 'none'" in h.get("content-security-policy", ""), where
        assert h.get("x-frame-options") == "DENY", where
        assert h.get("x-content-type-options") == "nosniff", where
        assert h.get("cache-control") == "no-store", where
        assert h.get("cross-origin-resource-policy") == "same-origin", where


#: Ways a script turns a string into markup or code.
HTML_SINKS = re.compile(
    r"\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
    r"\.setAttribute\(\s*[\"']on|\bhref\b|\bsrcdoc\b"
)


async def test_tenant_names_reach_the_page_as_text_only(ui: httpx.AsyncClient) -> None:
    """A route alias full of markup comes back in the figures as a JSON string (nosniff), and
    the served script has no way to turn such a string into markup: no HTML sink, no inline
    handler, no attribute named by data (so no ``on*`` or ``href`` from a server value)."""
    sent = await ui.post(
        "/v1/chat/completions",
        json={"model": HOSTILE_ALIAS, "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {TEAM}"},
    )
    assert sent.status_code == 200, sent.text
    figures = await ui.get(UI + "/data", headers={"authorization": f"Bearer {ADMIN}"})
    assert figures.headers["content-type"].startswith("application/json")
    assert [r["alias"] for r in figures.json()["routes"]] == [HOSTILE_ALIAS]
    script = (await ui.get(UI + "/static/dashboard.js")).text
    assert not HTML_SINKS.search(script), HTML_SINKS.search(script)
    # every attribute the script sets has a name written in the script (a literal key)
    assert "setAttribute(k, v)" in script and 'k === "class"' in script
    page = (await ui.get(UI)).text
    assert not re.search(r"<script(?![^>]*\bsrc=)|\son[a-z]+=", page), "inline script"
