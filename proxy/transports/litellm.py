"""Translation through litellm: the only module that imports it.

For providers that need translation (Gemini, Bedrock, Vertex, Cohere, an Anthropic route with
extra litellm_params, ...): ``litellm.acompletion``, which speaks the chat-completions wire on
routefit's side. Its answers come back as chat-completions JSON and SSE events, so the chat wire
reads them exactly as it reads a passthrough provider's.

What it costs, and when it is paid: ``import litellm`` is ~150 MiB of resident memory (3,200
modules, most of them pydantic models of every provider's API; importing any one provider's
transformation module runs the package's ``__init__`` and costs the same) and seconds of CPU
(bench/REPORT.md, section 2: a worker with a ``gemini/`` route idles at ~275 MiB, one without
at ~110-130). So it is imported only when a configured route needs it (OpenAI-compatible and
plain Anthropic routes never do: tests/transports/test_imports.py), and then at start-up, in a
thread, not under the first request to such a route: deferring it would show a lower idle
figure right after start, but the first request would wait seconds for the import and the
worker would hold the same memory from then on. The import is this module's, not any
transport's (it is the process's, whatever app runs in it): ``preload`` starts it, ``loaded``
says whether it is done (``/readyz``'s ``litellm`` check), and a call waits for it.

What a provider sends back is bounded here too (``max_provider_body_bytes`` for a whole answer,
``max_sse_event_bytes`` for one event of a stream), as on the passthrough: litellm reads each
answer itself, so routefit hands its provider handlers an HTTP client whose transport counts
(proxy/transports/bounded_http.py), and an answer over the bound is the same 502
``upstream_too_large`` (or the wire's error event, once the stream started). The providers
whose litellm handler takes that client (``client=`` as an ``AsyncHTTPHandler``) get it: those
in ``_HONOURS_CLIENT`` (Gemini, Vertex AI, Bedrock, Anthropic with extra params). What litellm
serves through the OpenAI SDK (OpenAI-wire providers, Azure: ``client=`` there is an SDK
client) gets it as the HTTP client litellm builds its SDK clients around (``_sdk_session``),
whose cookie jar keeps nothing, since those SDK clients serve every team. Cohere, whose
handler drops a given client, keeps litellm's own, unbounded one. So does every provider when
routefit's environment names an HTTP proxy (``HTTPS_PROXY`` ...): the wrapped transport would
not follow it, and reaching the provider comes before bounding its answer (start-up logs which
one applies).

A stream through that client also ends where the provider's does, not when its body does
(``_ending_transport``): litellm reads a stream to its body's end, and holds back the last chunk
(its finish reason and usage) until then, so a provider (or a proxy before it) that keeps the
body open after its last event held the client's stream open until the read timeout and then
ended it with an error after a whole answer. The provider's SSE body is cut at its wire's end
(``proxy.transports.provider_http.Events``: Anthropic's ``message_stop``, Gemini's last chunk
and a quiet body), which litellm then reads as the body's end.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import http.cookiejar
import importlib
import logging
import os
import threading
import urllib.request
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from proxy.config import Upstream
from proxy.errors import ProxyError
from proxy.exchange import (
    EMBEDDINGS,
    GEMINI,
    MESSAGES,
    UNREADABLE,
    Completion,
    EventStream,
    Outbound,
    StreamBroken,
    Transient,
    unreadable,
)
from proxy.exchange.sse import DONE, EventTooLarge, LoopTurns
from proxy.providers import Bounds, Deployment
from proxy.transports.provider_errors import (
    RETRY_STATUSES,
    account_figures_hidden,
    redact,
    retry_after,
)

if TYPE_CHECKING:
    # bounded_http (and httpx under it) only serve a call through litellm, which imports httpx
    # itself: imported at the first call, a deployment without litellm routes never holds them
    # (~4.5 MiB of a worker's memory).
    from proxy.transports.bounded_http import BoundedTransport, Trip

__all__ = ["LiteLLM", "close_sessions", "loaded", "preload"]

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

#: litellm providers whose chat handler uses a ``client=`` ``AsyncHTTPHandler`` it is given
#: (read in litellm's ``main.py`` and handlers: Gemini/Vertex's, Bedrock's, Anthropic's). Cohere's
#: handler drops ``client=`` and Azure's takes it for an OpenAI SDK client: not here.
#: An HTTP proxy in the environment: litellm's own client follows it, a given transport would not.
_PROXIED = bool(urllib.request.getproxies())
_HONOURS_CLIENT = frozenset({"gemini", "vertex_ai", "vertex_ai_beta", "bedrock", "anthropic"})


def _import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = importlib.import_module("litellm")
    setattr(litellm, "telemetry", False)  # noqa: B010 - no network calls of its own
    setattr(litellm, "suppress_debug_info", True)  # noqa: B010
    return litellm


#: The process's one import of litellm, once begun (a thread's result: any event loop awaits it).
_loading: concurrent.futures.Future[Any] | None = None
_lock = threading.Lock()


def _run(future: concurrent.futures.Future[Any]) -> None:
    try:
        future.set_result(_import_litellm())
    except BaseException as exc:  # kept for whoever awaits it
        future.set_exception(exc)


def preload() -> None:
    """Begin importing litellm in a thread, once per process (start-up stays fast)."""
    global _loading
    with _lock:
        if _loading is not None:
            return
        _loading = concurrent.futures.Future()
        future = _loading
    if _PROXIED:
        logging.getLogger("routefit").warning(
            "an HTTP proxy is set: litellm routes use litellm's own client, which follows "
            "it, and their provider answers are not bounded by max_provider_body_bytes"
        )
    threading.Thread(target=_run, args=(future,), name="routefit-litellm", daemon=True).start()


def loaded() -> bool:
    """Whether litellm is imported (and the import did not fail)."""
    loading = _loading
    return loading is not None and loading.done() and loading.exception() is None


async def _module() -> Any:
    preload()
    assert _loading is not None
    return await asyncio.wrap_future(_loading)


class _Chunks:
    """litellm's stream as chat-completions SSE events (usage chunk and ``[DONE]`` included)."""

    def __init__(self, resp: Any, up: Upstream, mark: Trip) -> None:
        self._resp = resp
        self._up = up
        self._mark = mark

    async def __aiter__(self) -> AsyncIterator[bytes]:
        turns = LoopTurns()  # litellm's chunks, as the native paths' events (``split_stream``)
        try:
            async for chunk in self._resp:
                event = b"data: " + orjson.dumps(chunk.model_dump(exclude_none=True)) + b"\n\n"
                yield event
                await turns.after(len(event))
        except Exception as exc:  # litellm raises its own tree mid-stream
            if self._mark.reason is not None:
                raise EventTooLarge(self._mark.reason) from None
            raise StreamBroken(_litellm_error(exc, self._up).message) from None
        yield DONE

    async def aclose(self) -> None:
        # Closing litellm's stream wrapper closes its HTTP response: without it, a client that
        # goes away would leave the provider's connection streaming into nothing.
        closer = getattr(self._resp, "aclose", None)
        if closer is not None:
            await closer()


def _stream_wire(path: str) -> str | None:
    """The provider wire of a streamed answer to ``path`` (litellm's request URL), whose end
    ``Events`` knows; None for any other (Bedrock's binary event stream, ...)."""
    if ":streamGenerateContent" in path:  # Gemini and Vertex AI's Gemini
        return GEMINI
    if path.endswith("/messages") or ":streamRawPredict" in path:  # Anthropic, on Vertex too
        return MESSAGES
    return None


def _bounded_transport(bounds: Bounds) -> Any:
    """litellm's own transport (its aiohttp one by default), wrapped: the bound changes what is
    read, never how the provider is reached."""
    import httpx

    from proxy.transports.bounded_http import BoundedTransport

    handlers = importlib.import_module("litellm.llms.custom_httpx.http_handler")
    inner = handlers.AsyncHTTPHandler.create_async_transport()
    if inner is None:
        inner = httpx.AsyncHTTPTransport()
    return _ending_transport()(BoundedTransport(inner, bounds.max_body, bounds.max_event))


#: The HTTP client litellm builds its OpenAI SDK clients around, per event loop and bounds
#: (``_sdk_session``).
_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Bounds, Any]] = (
    weakref.WeakKeyDictionary()
)


def _sdk_session(bounds: Bounds) -> Any:
    """The HTTP client for litellm to build its OpenAI SDK clients around (its
    ``aclient_session``: what it serves through the SDK — OpenAI-wire providers, Azure — and
    does not hand ``client=``): routefit's bounded transport, with a cookie jar that keeps
    nothing. litellm keeps one SDK client per provider key and address for every team, and the
    httpx client it would build keeps the cookies a provider's edge sets (api.openai.com's
    ``__cf_bm``): one team's answer's cookie then went out with the next team's request.

    The process's, not a config generation's: litellm keeps an SDK client an hour, around the
    HTTP client it was built with, past the generation that built it (a retired generation's
    closed transport would fail every call until then). Per event loop, as litellm keys its
    SDK clients, and per bounds (a reload's new bounds reach an SDK client when it is rebuilt)."""
    import httpx

    mine = _sessions.setdefault(asyncio.get_running_loop(), {})
    session = mine.get(bounds)
    if session is None:
        session = httpx.AsyncClient(transport=_bounded_transport(bounds), cookies=_no_cookies())
        mine[bounds] = session
    return session


async def close_sessions() -> None:
    """Close this event loop's ``_sdk_session`` clients: the app's end (never a generation's,
    whose retirement would leave litellm's cached SDK clients a closed transport)."""
    for session in _sessions.pop(asyncio.get_running_loop(), {}).values():
        await session.aclose()


def _no_cookies() -> http.cookiejar.CookieJar:
    """A cookie jar that keeps none: routefit's provider clients serve every team."""
    return http.cookiejar.CookieJar(_KeepNoCookie())


class _KeepNoCookie(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


@functools.cache
def _ending_transport() -> Any:
    """The transport class that ends a provider's SSE body at its wire's end (the module's
    docstring): built at the first call, since httpx is imported only for litellm routes."""
    import httpx

    from proxy.transports.provider_http import Events

    class Body:
        """An httpx body as ``Events`` reads one (errors left as httpx raised them: litellm
        maps its transport's own)."""

        def __init__(self, inner: httpx.AsyncByteStream) -> None:
            self._inner = inner

        async def chunks(self) -> AsyncIterator[bytes]:
            async for chunk in self._inner:
                yield chunk

        async def finish(self, whole: bool) -> None:
            await self._inner.aclose()

    class Ended(httpx.AsyncByteStream):
        """The body up to its provider's last event."""

        def __init__(self, inner: httpx.AsyncByteStream, wire: str, max_event: int) -> None:
            self._events = Events(Body(inner), max_event, wire)

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for event in self._events:
                yield event

        async def aclose(self) -> None:
            await self._events.aclose()

    class EndingTransport(httpx.AsyncBaseTransport):
        def __init__(self, inner: BoundedTransport) -> None:
            self._inner = inner

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            resp = await self._inner.handle_async_request(request)
            wire = _stream_wire(request.url.path)
            sse = resp.headers.get("content-type", "").startswith("text/event-stream")
            if wire and sse and isinstance(resp.stream, httpx.AsyncByteStream):
                # the bound counts the bytes first: an event over it fails as it did
                resp.stream = Ended(resp.stream, wire, self._inner.max_event)
            return resp

        async def aclose(self) -> None:
            await self._inner.aclose()

    return EndingTransport


class LiteLLM:
    """litellm behind the transport seam (its import: ``preload``, this module's)."""

    def __init__(self) -> None:
        #: one bounded transport per deployment bounds (in practice one: the settings'), and
        #: one litellm client per timeout over it (a handler given a client may not pass the
        #: call's timeout on)
        self._transports: dict[Bounds, Any] = {}
        self._clients: dict[tuple[float, Bounds], Any] = {}

    async def aclose(self) -> None:
        self._clients.clear()
        transports, self._transports = self._transports, {}
        for transport in transports.values():
            await transport.aclose()

    def _client(self, up: Upstream, bounds: Bounds) -> Any:
        """The bounded client for ``up``'s calls, or None where its handler would misuse it."""
        if up.provider not in _HONOURS_CLIENT or _PROXIED:
            return None
        handlers = importlib.import_module("litellm.llms.custom_httpx.http_handler")
        client = self._clients.get((up.timeout, bounds))
        if client is None:
            transport = self._transport(bounds)
            client = handlers.AsyncHTTPHandler(timeout=up.timeout, transport=transport)
            self._clients[(up.timeout, bounds)] = client
        return client

    def _transport(self, bounds: Bounds) -> Any:
        transport = self._transports.get(bounds)
        if transport is None:
            transport = _bounded_transport(bounds)
            self._transports[bounds] = transport
        return transport

    async def _call(
        self, target: Deployment, kwargs: dict[str, Any], mark: Trip, call: str = "acompletion"
    ) -> Any:
        """``litellm.acompletion`` (or ``call``: ``aembedding``) over a bounded client (a
        handler's ``client=``, or the SDK clients' ``_sdk_session``), its errors mapped."""
        from proxy.transports.bounded_http import trip

        up = target.upstream
        litellm = await _module()
        client = self._client(up, target.bounds) if call == "acompletion" else None
        if client is not None:
            kwargs["client"] = client
        elif not _PROXIED:
            litellm.aclient_session = _sdk_session(target.bounds)
        token = trip.set(mark)
        try:
            return await getattr(litellm, call)(**kwargs)
        except Exception as exc:  # litellm raises its own exception tree; map it
            if mark.reason is not None:
                raise ProxyError(
                    502,
                    f"upstream {up.model} sent an answer over its bound: {mark.reason} "
                    "(routefit_settings.max_provider_body_bytes / max_sse_event_bytes)",
                    code="upstream_too_large",
                ) from None
            if client is not None and not mark.sent:
                raise _untranslatable(exc, up) from None
            raise _litellm_error(exc, up) from None
        finally:
            trip.reset(token)

    async def send(self, target: Deployment, out: Outbound) -> Completion | EventStream:
        """``out`` (chat) through ``litellm.acompletion``; an embeddings request
        (``proxy.embeddings``) through ``litellm.aembedding``."""
        up = target.upstream
        kwargs = _kwargs(up, out.body, _steering(await _module()))
        if out.headers:  # the headers the gateway adds for the provider (a traceparent)
            kwargs["extra_headers"] = {**kwargs.get("extra_headers", {}), **out.headers}
        from proxy.transports.bounded_http import Trip

        mark = Trip()
        if out.wire == EMBEDDINGS:
            resp = await self._call(target, kwargs, mark, "aembedding")
            # base64 vectors (what the openai SDK asks for) sit in a field typed list[float]
            return _completion(resp, up, warnings=False)
        if out.stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
            kwargs["timeout"] = up.timeout_for(True)
            return _Chunks(await self._call(target, kwargs, mark), up, mark)
        return _completion(await self._call(target, kwargs, mark), up)


def _completion(resp: Any, up: Upstream, **dump: Any) -> Completion:
    """litellm's answer as JSON. What litellm parsed is still the provider's word: a value
    JSON cannot hold (an integer beyond 64 bits in its usage) makes the answer malformed, as
    a stream's makes its stream broken (``_Chunks``), not routefit's internal error."""
    try:
        data = resp.model_dump(exclude_none=True, **dump)
        return Completion(orjson.dumps(data), data)
    except UNREADABLE:
        raise unreadable(up.model) from None


#: Settings of the OpenAI client litellm builds (not in litellm's own list below): where the
#: request goes, with which key and headers, how long and how often it is tried.
_CLIENT_SETTINGS = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "base_url",
        "api_base",
        "api_key",
        "api_version",
        "organization",
        "deployment_id",
        "default_headers",
        "extra_headers",
        "headers",
        "timeout",
        "request_timeout",
        "max_retries",
        "num_retries",
        "client",
    }
)


@functools.cache
def _steering(litellm: Any) -> frozenset[str]:
    """Body keys litellm reads as its own settings rather than the model's parameters. A
    client's request body is not a place to set them: ``base_url`` there wins over the route's
    ``api_base`` and would send routefit's provider key to the client's host; ``mock_response``
    answers without the provider; ``custom_llm_provider``, ``metadata`` and the callbacks' keys
    reach litellm's machinery. They are dropped before litellm sees the body (the route's own
    ``litellm_params`` set what litellm needs). Read from the loaded module (its list is
    litellm's to keep current; importing it here would race the preload's import)."""
    return _CLIENT_SETTINGS | frozenset(litellm.types.utils.all_litellm_params)


def _kwargs(up: Upstream, body: Mapping[str, Any], steering: frozenset[str]) -> dict[str, Any]:
    """litellm's call: the route's litellm_params, then the client's body over them, then where
    the route goes. As in LiteLLM's router (``{**deployment params, **request}``), a
    deployment's ``temperature`` or ``max_tokens`` is a default the request overrides: laid
    over the body, it replaced the client's own, and a ``max_tokens`` there replaced the
    output cap the fit reserved for. Settings the body may not carry (``steering``) stay the
    route's alone."""
    kwargs: dict[str, Any] = {"drop_params": True} if up.drop_params else {}
    kwargs.update(up.extra)
    kwargs.update((k, v) for k, v in body.items() if k not in steering)
    kwargs["model"] = up.model
    if up.api_base:
        kwargs["api_base"] = up.api_base
    if up.api_key:
        kwargs["api_key"] = up.api_key
    kwargs["timeout"] = up.timeout
    kwargs.setdefault("num_retries", 0)
    return kwargs


def _untranslatable(exc: Exception, up: Upstream) -> ProxyError:
    """litellm failed before any request left for the provider: it could not make this body
    into the provider's (a tool kind it does not map, a field of the wrong type). That is the
    request's doing, not the provider's: a 400, neither retried nor held against the deployment
    -- else one team's malformed requests would open the breaker of a deployment every team
    shares. Only where litellm sends through routefit's bounded client, which sees the send."""
    if type(exc).__name__ != "APIConnectionError":  # its catch-all; its other errors say more
        return _litellm_error(exc, up)
    message = redact(str(getattr(exc, "message", None) or exc), up.api_key)
    first = message.split("\n", 1)[0]
    return ProxyError(400, f"the request cannot be translated for {up.model}: {first}")


def _litellm_error(exc: Exception, up: Upstream) -> ProxyError:
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    message = redact(str(getattr(exc, "message", None) or exc), up.api_key)
    if status == 429 or name == "RateLimitError":
        message = account_figures_hidden(message)
    if name == "ContextWindowExceededError":
        return ProxyError(400, message, code="context_length_exceeded")
    if name == "Timeout" or "Timeout" in name:
        return ProxyError(504, f"upstream {up.model} timed out", code="upstream_timeout")
    # litellm's APIConnectionError is its catch-all (always status 500, message with a Python
    # traceback): never the provider's answer, and a traceback never reaches a client.
    if name == "APIConnectionError" or (
        name == "ServiceUnavailableError" and not isinstance(status, int)
    ):
        first = message.split("\n", 1)[0]
        return Transient(
            502, f"upstream {up.model} is unreachable: {first}", code="upstream_unreachable"
        )
    if isinstance(status, int) and 400 <= status < 600:
        response = getattr(exc, "response", None)
        found = getattr(response, "headers", None) if response is not None else None
        upstream_headers: Mapping[str, str] = found if isinstance(found, Mapping) else {}
        headers = {}
        if upstream_headers.get("retry-after"):
            headers["retry-after"] = str(upstream_headers["retry-after"])
        if status in RETRY_STATUSES:
            return Transient(
                status, message, headers=headers, retry_after=retry_after(upstream_headers)
            )
        return ProxyError(status, message, headers=headers)
    return ProxyError(502, f"upstream {up.model} failed: {name}: {message}")
