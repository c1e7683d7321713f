"""An in-process transport answered by an httpx handler, like ``httpx.MockTransport``.

For running the whole gateway in-process: every wire, fitting, budgets, errors and the
provider's answers read by the very rules the passthrough applies (``provider_http``: error
statuses, body and event bounds, SSE re-cut into complete events, malformed JSON), without a
socket or a subprocess. The request a handler receives is the one the passthrough would send
(URL per wire, auth headers, body with ``model`` rewritten), as an ``httpx.Request``.

Use::

    from proxy.app import create_app
    from proxy.sim.app import create_app as create_sim
    from proxy.transports.mock import MockTransport, asgi_transport

    # the provider simulator (or any ASGI app) answering every route of the config
    app = create_app(config, transport=asgi_transport(create_sim()))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://routefit"
        ) as client:
            await client.post("/v1/chat/completions", json=...)

    # or a function of your own
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json={"error": {"message": "slow down"}})

    app = create_app(config, transport=MockTransport(handler))

The injected transport carries every passthrough request of every route (``sim://local``
routes included: no simulator thread is started when a transport is injected), and routefit's
own chat→Messages translation runs over it; only litellm routes still need litellm.
The config's bounds (``max_provider_body_bytes``, ``max_sse_event_bytes``) apply as on the
network: they travel with each deployment. ``MockTransport.sent`` keeps every request it was
given, in order. A handler that raises an
``httpx.TimeoutException`` is a provider that timed out, any other ``httpx.TransportError`` one
that could not be reached (``Transient``: retried like a refused connection).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import httpx

from proxy.errors import ProxyError
from proxy.exchange import Completion, EventStream, Outbound, Transient
from proxy.providers import Deployment
from proxy.transports.provider_http import ReadBroken, interpret, provider_request
from proxy.types import ASGIApp

__all__ = ["Handler", "MockTransport", "asgi_handler", "asgi_transport"]

#: What answers a request: ``async (httpx.Request) -> httpx.Response``, as in httpx.
Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


class _Response:
    """An httpx response as ``provider_http.RawResponse``."""

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp
        self._eof = False

    @property
    def status(self) -> int:
        return self._resp.status_code

    @property
    def headers(self) -> Mapping[str, str]:
        return self._resp.headers

    @property
    def content_length(self) -> int | None:
        length = self._resp.headers.get("content-length")
        return int(length) if length is not None and length.isdigit() else None

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.aiter_bytes():
                yield chunk
        except httpx.TimeoutException:
            raise TimeoutError from None
        except httpx.HTTPError as exc:
            raise ReadBroken(type(exc).__name__) from None
        self._eof = True

    def at_eof(self) -> bool:
        return self._eof

    async def whole(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def finish(self, whole: bool) -> None:
        await self._resp.aclose()


class MockTransport:
    """Sends each request to ``handler`` and reads its response as the passthrough would."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.sent: list[httpx.Request] = []

    async def send(self, target: Deployment, out: Outbound) -> Completion | EventStream:
        built = provider_request(target, out)
        request = httpx.Request("POST", built.url, headers=built.headers, content=built.body)
        self.sent.append(request)
        model = target.upstream.model
        try:
            response = await self.handler(request)
        except httpx.TimeoutException:
            raise ProxyError(504, f"upstream {model} timed out", code="upstream_timeout") from None
        except httpx.TransportError as exc:
            raise Transient(
                502,
                f"upstream {model} is unreachable: {type(exc).__name__}",
                code="upstream_unreachable",
            ) from None
        return await interpret(_Response(response), target, out)

    async def aclose(self) -> None:
        return None


def asgi_handler(app: ASGIApp) -> Handler:
    """A handler that serves each request with ``app`` in process (no socket)."""
    transport = httpx.ASGITransport(app=app)

    async def handle(request: httpx.Request) -> httpx.Response:
        return await transport.handle_async_request(request)

    return handle


def asgi_transport(app: ASGIApp) -> MockTransport:
    """A ``MockTransport`` whose provider is the ASGI ``app`` (e.g. ``proxy.sim.app``'s)."""
    return MockTransport(asgi_handler(app))
