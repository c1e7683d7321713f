"""Browsers and open mode: another site's page may not use routefit through a browser.

Open mode admits every request, and the README runs it on 127.0.0.1 with the developer's own
provider keys in its environment. Every website the developer visits can make the browser send a
request there. A ``text/plain`` POST is a CORS "simple request", sent without a preflight: the
page cannot read the answer, but the completion is made and paid for. And a page whose name its
owner re-points at 127.0.0.1 once it is loaded (DNS rebinding) is same-origin with routefit and
reads every answer. So, before any route (docs/security.md, "Browsers and open mode"):

* **Another site's page** (open mode): a browser's ``Sec-Fetch-Site`` other than
  ``same-origin`` or ``none`` (``cross-site``, ``same-site``: another port of localhost is another
  program), or an ``Origin`` that is not the request's own (``null`` too), is refused; a GET or
  HEAD that opens a page (a link the developer follows) is not, since no page can read it.
* **A name re-pointed at us** (DNS rebinding): a ``Host`` that is neither a loopback name
  (``localhost``, ``*.localhost``), nor an IP literal (nobody's DNS can re-point those), nor one
  of ``routefit_settings.allowed_hosts``, is refused. Without ``allowed_hosts`` only open mode
  checks, and only connections that arrived at a loopback or private address (``server`` in the
  ASGI scope): those a page reaches only through a browser inside the network; a public address
  is reachable without any browser, and an in-process client (no socket) names no address. With
  ``allowed_hosts`` every request is checked, keys or not; ``*`` turns the check off. The probes
  (``/healthz``, ``/readyz``, LiteLLM's liveness and readiness) answer any ``Host``: a load
  balancer's health check sends whatever name it was given, and they tell nothing worth reading.

With keys, a browser check is not needed: no page can make a browser send a key, the dashboard's
cookie is ``SameSite=Strict``, and keyed deployments behind proxies or in Kubernetes keep
answering any ``Host`` unless the operator lists them. Programs (the SDKs and CLIs) send no
``Origin`` nor ``Sec-Fetch-Site``, and a ``Host`` of ``127.0.0.1:PORT`` or ``localhost:PORT``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from starlette.responses import Response

from proxy.errors import ProxyError
from proxy.generation import SCOPE_KEY, Generation
from proxy.types import ASGIApp, Receive, Scope, Send

__all__ = ["BrowserFence", "refusal"]

#: The probes every ``Host`` may call (see the module doc).
PROBES = frozenset(
    {"/healthz", "/readyz", "/health/liveliness", "/health/liveness", "/health/readiness"}
)
#: ``Sec-Fetch-Site`` of the page's own requests, or of the developer typing the address.
_OWN_SITE = frozenset({"same-origin", "none"})
_DEFAULT_PORTS = {"http": 80, "https": 443}

#: The wire's error answer for a path (``proxy.app``: each wire's clients read their own shape).
Refuse = Callable[[str, ProxyError], Response]


def _headers(scope: Scope) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in scope.get("headers", ()):
        found.setdefault(name.decode("latin-1"), []).append(value.decode("latin-1"))
    return found


def split_host(value: str) -> tuple[str, int | None]:
    """A ``Host`` (or an origin's authority) as (name, port): lower case, IPv6 unbracketed,
    a trailing dot dropped (``localhost.`` is ``localhost``); port None when absent or bad."""
    value = value.strip().lower()
    port: int | None = None
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        text = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        name, _, text = value.partition(":")
    else:  # a name, or a bare IPv6 address (no port can be told from it)
        name, text = value, ""
    if text:
        port = int(text) if text.isdigit() else -1
    return name.rstrip("."), port


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def host_allowed(name: str, allowed: Iterable[str]) -> bool:
    """Whether a ``Host`` name is answered: a loopback name, an IP literal, or an entry of
    ``allowed_hosts`` (``*.suffix`` covers the suffix's subdomains, ``*`` everything)."""
    if name == "localhost" or name.endswith(".localhost") or _ip(name) is not None:
        return True
    for entry in allowed:
        if entry == "*" or entry == name:
            return True
        if entry.startswith("*.") and name.endswith(entry[1:]):
            return True
    return False


def _local_network(scope: Scope) -> bool:
    """Whether the connection arrived at an address only a browser inside the network reaches
    (loopback, private, link-local, shared): where a re-pointed name leads (module doc). A unix
    socket (no address) is local: whatever forwards to it runs on this host."""
    server = scope.get("server")
    if server is None:
        return True
    address = _ip(str(server[0]))
    return address is not None and not address.is_global


def _host_refusal(
    scope: Scope, headers: dict[str, list[str]], open_mode: bool, allowed: tuple[str, ...]
) -> ProxyError | None:
    if "*" in allowed or scope["path"] in PROBES:
        return None
    if not allowed and not (open_mode and _local_network(scope)):
        return None
    for value in headers.get("host", ()):  # none: not a browser (HTTP/1.0), which always sends it
        name, _ = split_host(value)
        if not host_allowed(name, allowed):
            return ProxyError(
                403,
                f"routefit does not answer the Host {name!r}: only loopback names, IP addresses "
                "and the names in routefit_settings.allowed_hosts (a name another site's DNS "
                "points at this machine lets its page read routefit); add it to "
                "routefit_settings.allowed_hosts if you reach routefit by that name",
                code="host_not_allowed",
            )
    return None


def _same_origin(origin: str, hosts: list[str]) -> bool:
    """Whether ``Origin`` is the request's own: the same name and port as its ``Host``, whose
    port, when absent, is the origin scheme's default (same-origin is the same scheme too)."""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    default = _DEFAULT_PORTS.get(parts.scheme.lower())
    if default is None or not parts.netloc or len(hosts) != 1:
        return False
    name, port = split_host(parts.netloc)
    host_name, host_port = split_host(hosts[0])
    return (name, port or default) == (host_name, host_port or default)


def _opens_a_page(scope: Scope, headers: dict[str, list[str]]) -> bool:
    """A link followed to a page: the browser shows the answer to the developer, no page can
    read it, and a GET changes nothing here."""
    mode = headers.get("sec-fetch-mode", [""])[0].strip().lower()
    dest = headers.get("sec-fetch-dest", [""])[0].strip().lower()
    return scope["method"] in ("GET", "HEAD") and mode == "navigate" and dest == "document"


def _foreign(scope: Scope, headers: dict[str, list[str]]) -> str | None:
    """What says another site's page sent the request (None: nothing does)."""
    for site in headers.get("sec-fetch-site", ()):
        if site.strip().lower() not in _OWN_SITE and not _opens_a_page(scope, headers):
            return f"Sec-Fetch-Site: {site.strip()}"
    for origin in headers.get("origin", ()):
        if not _same_origin(origin, headers.get("host", [])):
            return f"Origin: {origin.strip()}"
    return None


def refusal(scope: Scope, open_mode: bool, allowed: tuple[str, ...]) -> ProxyError | None:
    """Why this HTTP request is refused (the module doc's rules), or None."""
    if not open_mode and not allowed:
        return None  # keyed, no names listed: nothing to check (the usual deployment)
    headers = _headers(scope)
    refused = _host_refusal(scope, headers, open_mode, allowed)
    if refused is not None or not open_mode:
        return refused
    why = _foreign(scope, headers)
    if why is None:
        return None
    return ProxyError(
        403,
        f"routefit runs open (no keys) and refuses what another site's page makes a browser "
        f"send ({why}): it would spend the provider keys. Call routefit from a program or from "
        "its own pages, or configure keys (routefit_settings.teams, admin_key)",
        code="cross_site",
    )


class BrowserFence:
    """The module doc's rules around the app, read from the request's own config generation
    (inside ``proxy.generation.Pin``: a reload's ``allowed_hosts`` apply from its next request)."""

    def __init__(self, app: ASGIApp, refuse: Refuse) -> None:
        self.app = app
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            g = scope.get(SCOPE_KEY)
            if not isinstance(g, Generation):
                g = scope["app"].state.routefit.live.current
            allowed = g.config.settings.access.allowed_hosts
            err = refusal(scope, g.teams.open, allowed)
            if err is not None:
                await self.refuse(scope["path"], err)(scope, receive, send)
                return
        await self.app(scope, receive, send)
