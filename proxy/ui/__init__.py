"""The operator's dashboard at ``GET /routefit/ui``: static HTML/JS/CSS shipped in the package
(no build step, no CDN; charts are plain SVG), fed by ``GET /routefit/ui/data``.

Endpoints (see :mod:`proxy.ui.auth` for why the key travels as it does):

* ``GET /routefit/ui`` — the page (a shell: no data, so it needs no key);
* ``GET /routefit/ui/static/{name}`` — its script and style sheet;
* ``GET /routefit/ui/data`` — the figures; admin key as a bearer header, or the session cookie;
* ``GET /routefit/ui/requests`` — the request log (``proxy.records``, the store's per-team lists:
  the records ``GET /routefit/requests`` serves, read through ``proxy.ui.recent``), newest
  first, with the same filters
  (``route``, ``status`` as a code or a class, ``since``, ``limit``) plus ``team`` and ``key``
  (a key's fingerprint); same access as the data (the session cookie is scoped to this path);
* ``POST /routefit/ui/session`` — ``{"key": "<admin key>"}`` → the session cookie;
  ``DELETE`` revokes it (server-side: a copy of the cookie dies too); ``GET`` says whether this
  browser may read the figures.

Every response carries a strict Content-Security-Policy (same-origin scripts, styles and
fetches only; no framing, also as ``X-Frame-Options`` for browsers without ``frame-ancestors``),
so even a hostile route alias could not run script in the page. A sign-in must come from the
page itself (``_forged``): JSON, and not from another site's page.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from proxy.body import read_body
from proxy.budgets import Budgets
from proxy.calibrator import Calibrator
from proxy.config import Config
from proxy.errors import ProxyError, error_response
from proxy.metrics import Metrics
from proxy.records import ANONYMOUS, RequestRecord, matches, page, query
from proxy.store import StoreUnavailable
from proxy.teams import TeamDirectory
from proxy.ui.auth import COOKIE, SESSION_SECONDS, Sessions
from proxy.ui.data import DashboardData
from strategies.fit import FitReport

__all__ = ["Dashboard"]

PREFIX = "/routefit/ui"

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

_SECURITY = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    # frame-ancestors' older spelling, for browsers that ignore it in the CSP
    "x-frame-options": "DENY",
    # no other origin may embed the figures (an <img>/<script> of /data) or share our window
    "cross-origin-resource-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}

#: What a browser says started a request (Fetch Metadata's ``Sec-Fetch-Site``) when it was the
#: dashboard's own page, or the operator typing: anything else is another site's page.
_OWN_SITE = frozenset({"same-origin", "none"})


def _static_files() -> dict[str, tuple[bytes, str]]:
    """Every file of proxy/ui/static, read once: the only names the static route serves."""
    files = {}
    for entry in resources.files("proxy.ui").joinpath("static").iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return files


class Dashboard:
    """Mount with ``routes += dashboard.routes()``; call ``record(report)`` per fitted request."""

    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        calibrator: Calibrator,
        budgets: Budgets,
        teams: TeamDirectory,
    ) -> None:
        self.data = DashboardData(config, metrics, calibrator, budgets, teams)
        access = config.settings.access
        admins = (config.settings.admin_key_hash, access.master_key_hash)
        self.sessions = Sessions(teams, tuple(h for h in admins if h is not None), budgets.store)
        self.files = _static_files()

    def record(self, report: FitReport) -> None:
        self.data.record(report)

    def routes(self) -> list[BaseRoute]:
        return [
            Route(PREFIX, self.page, methods=["GET"]),
            Route(PREFIX + "/", self.page, methods=["GET"]),
            Route(PREFIX + "/static/{name}", self.static, methods=["GET"]),
            Route(PREFIX + "/data", self.figures, methods=["GET"]),
            Route(PREFIX + "/requests", self.requests, methods=["GET"]),
            Route(PREFIX + "/session", self.session_state, methods=["GET"]),
            Route(PREFIX + "/session", self.session, methods=["POST", "DELETE"]),
        ]

    async def page(self, request: Request) -> Response:
        body, media = self.files["index.html"]
        return Response(body, media_type=media, headers=_SECURITY)

    async def static(self, request: Request) -> Response:
        found = self.files.get(request.path_params["name"])
        if found is None:
            missing = ProxyError(404, f"unknown path {request.url.path}", code="not_found")
            return error_response(missing, headers=_SECURITY)
        return Response(found[0], media_type=found[1], headers=_SECURITY)

    async def figures(self, request: Request) -> Response:
        try:
            await self.sessions.authorize(request.headers, request.cookies, _client(request))
        except ProxyError as err:
            return error_response(err, headers=_SECURITY)
        body = orjson.dumps(await self.data.build())
        return Response(body, media_type="application/json", headers=_SECURITY)

    async def requests(self, request: Request) -> Response:
        try:
            await self.sessions.authorize(request.headers, request.cookies, _client(request))
            found = await self._log(request.query_params)
        except ProxyError as err:
            return error_response(err, headers=_SECURITY)
        except StoreUnavailable as exc:
            down = ProxyError(503, f"the store is unavailable: {exc}", code="store_unavailable")
            return error_response(down, headers=_SECURITY)
        return Response(page(found), media_type="application/json", headers=_SECURITY)

    async def _log(self, params: Mapping[str, str]) -> list[RequestRecord]:
        """The request log's records the filters pass: every team's, or the one named."""
        limit, route, status, since = query(params)
        team, key = params.get("team") or None, params.get("key") or None
        teams = self.data.log_teams()
        if team is not None:
            if team not in teams:
                raise ProxyError(400, f"unknown team {team!r}", param="team")
            teams = (team,)
        await self.data.recent.refresh(teams)
        found = [
            r
            for r in self.data.recent.records(teams)
            if matches(r, route, status, since) and (key is None or (r.key_id or ANONYMOUS) == key)
        ]
        return found[:limit]

    async def session_state(self, request: Request) -> Response:
        """Whether this browser may read the figures (always 200: the page asks before it
        fetches, so signing in never shows up as a failed request)."""
        try:
            await self.sessions.authorize(request.headers, request.cookies, _client(request))
            session = await self.sessions.valid(request.cookies.get(COOKIE))
        except ProxyError as err:
            if err.status >= 500:
                return error_response(err, headers=_SECURITY)
            authorized = session = False
        else:
            authorized = True
        body = {"authorized": authorized, "open": self.sessions.open, "session": session}
        return Response(orjson.dumps(body), media_type="application/json", headers=_SECURITY)

    async def session(self, request: Request) -> Response:
        # https as the client saw it: direct TLS, or a trusted proxy's X-Forwarded-Proto
        secure = request.url.scheme == "https"
        try:
            if request.method == "DELETE":
                await self.sessions.logout(request.cookies.get(COOKIE))
                response = Response(status_code=204, headers=_SECURITY)
                response.delete_cookie(COOKIE, path=PREFIX, secure=secure, samesite="strict")
                return response
            _forged(request)
            token = await self.sessions.login(await _posted_key(request), _client(request))
        except ProxyError as err:
            return error_response(err, headers=_SECURITY)
        response = Response(status_code=204, headers=_SECURITY)
        response.set_cookie(
            COOKIE,
            token,
            max_age=SESSION_SECONDS,
            path=PREFIX,
            secure=secure,
            httponly=True,
            samesite="strict",
        )
        return response


def _client(request: Request) -> str:
    """The client's address as the server resolved it (a trusted proxy's X-Forwarded-For)."""
    return request.client.host if request.client is not None else "unknown"


def _forged(request: Request) -> None:
    """Refuse a sign-in another site's page could have sent, before any key is looked at.

    A cross-site ``fetch`` or form may POST here without a CORS preflight when its body is
    ``text/plain``, a form or a typeless blob: it cannot read the answer, but each wrong key it
    posts is a failed admin-key guess of the operator's own address, and six of them lock every
    admin door (this one, the bearer header, reload, calibration) for that address for up to
    15 min. Only JSON is taken (a cross-site JSON POST needs a preflight, which routefit never
    grants), and a browser's ``Sec-Fetch-Site`` must say the page is ours."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in _OWN_SITE:
        raise ProxyError(
            403, "the dashboard's sign-in is taken from its own page only", code="cross_site"
        )
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise ProxyError(
            400,
            'expected {"key": "<admin key>"} with content-type: application/json',
            code="invalid_content_type",
        )


#: The most a login body may be: ``{"key": ...}``. Anyone may post one, before any key is
#: checked: read whole and unbounded, 1 GiB of it took the worker to 2.2 GB.
_LOGIN_BODY_BYTES = 65536


async def _posted_key(request: Request) -> str:
    body, _ = await read_body(request, _LOGIN_BODY_BYTES)  # over it: a 413, nothing kept
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        payload = None
    key = payload.get("key") if isinstance(payload, dict) else None
    if not isinstance(key, str) or not key:
        raise ProxyError(400, 'expected {"key": "<admin key>"}', code="invalid_json")
    return key
