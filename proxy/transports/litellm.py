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

litellm's calls run on an event loop of their own (``_loop``, run by the thread that imported
litellm: ``_run``), never on routefit's. litellm does CPU work inside its coroutines without
yielding (the request's translation into the provider's wire, the answer's parsing into its
pydantic models), and some of it grows with the square of the request: its Gemini conversion
scans the assistant's tool calls once per tool result, so 2,000 calls with their results
(291 KB) held routefit's loop 1.3-3 s, 8,000 (1.1 MB) 28-51 s, and every other team's request on
the worker waited as long. On a loop of its own that work competes with routefit's loop only for
the GIL, which the interpreter hands over every switch interval (5 ms): with the same 2,000
calls being translated, another team's small requests were answered in milliseconds instead of
waiting out the translation (docs/security.md). litellm's loop is one thread: requests to routes
only litellm serves still wait behind such a translation, every other route does not. routefit's
loop awaits each call (``_on_litellm``), each chunk of a stream (read, parsed and dumped there:
``_Chunks``) and a whole answer's dump. The task there runs in a copy of the caller's context
(the call's ``Trip`` is set in it; the app's logging context goes along), cancelling the caller
cancels it, and a stream opened for a client that has left is closed there. What litellm holds
that is bound to a loop (the bounded transports and clients: ``LiteLLM``, closed there with
their generation; the SDK clients' session: ``_sdk_session``; litellm's own cached SDK clients
and background tasks) is made and used on that loop, which lives as long as the process (a
daemon thread, stopped only at the process's exit, ``_stop``: every app in the process shares
it, as they share litellm's import and caches).

Tests: litellm never reaches its providers through routefit's injected transport
(``create_app(config, transport=...)``, ``proxy.transports.mock``): it sends through its own
HTTP client, or routefit's bounded one over litellm's socket transport, so a test serves a
litellm route from a real server on loopback (a thread, bound to no loop), and nothing a test's
loop made is awaited on litellm's. A test that wanted a litellm route answered in process would
hand litellm a transport whose handler runs on the loop that made it
(``asyncio.run_coroutine_threadsafe`` back there), not call an ASGI app from litellm's loop.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import http.cookiejar
import importlib
import logging
import os
import threading
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

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

__all__ = ["LiteLLM", "loaded", "preload"]

T = TypeVar("T")

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
#: litellm's own event loop, run by the thread that imported it (``_run``), for the process.
_loop: asyncio.AbstractEventLoop | None = None
#: How long the process's exit waits for litellm's loop to end its tasks, and then to stop.
_STOP_S = 2.0
#: Tasks started on litellm's loop that nobody awaits (closing an abandoned stream): held here,
#: since the loop keeps only a weak reference to a task.
_unawaited: set[asyncio.Task[Any]] = set()


def _run(future: concurrent.futures.Future[Any]) -> None:
    """Import litellm, then run its event loop in this thread for the rest of the process."""
    global _loop
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        litellm = _import_litellm()
    except BaseException as exc:  # kept for whoever awaits it
        loop.close()
        future.set_exception(exc)
        return
    _loop = loop
    atexit.register(_stop, loop, threading.current_thread())
    future.set_result(litellm)
    try:
        loop.run_forever()
    finally:
        loop.close()


def _stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """At the process's exit: end litellm's loop and the tasks still on it (its logging worker
    waits for records forever), so that none is destroyed pending (asyncio logs each one that
    is as an error, on every worker's exit); and close the SDK clients' sessions
    (``_sdk_session``) there, on the loop their connections belong to: left open, each printed
    "Exception ignored in LiteLLMAiohttpTransport.__del__" and a traceback as the interpreter
    tore down."""

    async def end() -> None:
        sessions = list(_sessions.values())
        _sessions.clear()
        for session in sessions:
            with contextlib.suppress(Exception):  # the process is ending: close what closes
                await session.aclose()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_STOP_S)

    if loop.is_closed() or not thread.is_alive():
        return
    with contextlib.suppress(Exception):  # a task that will not end, a loop closing meanwhile
        asyncio.run_coroutine_threadsafe(end(), loop).result(timeout=_STOP_S)
    with contextlib.suppress(RuntimeError):  # closed already
        loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=_STOP_S)


def preload() -> None:
    """Begin importing litellm in a thread, once per process (start-up stays fast); the thread
    then runs litellm's event loop."""
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


async def _on_litellm(
    work: Callable[[], Coroutine[Any, Any, T]], lost: Callable[[T], object] | None = None
) -> T:
    """``work()`` as a task on litellm's loop (``_module`` started it), awaited on the caller's.

    The task runs in a copy of the caller's context (as ``run_coroutine_threadsafe``'s would:
    the app's logging context goes along). Cancelling the caller cancels the task there. A
    result that arrives once the caller has gone (its cancellation crossed the task's end) is
    handed to ``lost`` on litellm's loop: a stream opened for a client that left is closed there,
    not left reading the provider into nothing."""
    loop = _loop
    assert loop is not None, "litellm's loop runs once it is imported: await _module() first"
    if asyncio.get_running_loop() is loop:
        return await work()
    return await asyncio.wrap_future(_submit(loop, work, lost))


def _submit(
    loop: asyncio.AbstractEventLoop,
    work: Callable[[], Coroutine[Any, Any, T]],
    lost: Callable[[T], object] | None,
) -> concurrent.futures.Future[T]:
    """``run_coroutine_threadsafe`` with ``lost`` (``_on_litellm``): its chaining drops the
    result of a task whose future was cancelled as it ended."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def begin() -> None:  # on litellm's loop
        if future.cancelled():  # the caller left before the task began: never start it
            return
        task = loop.create_task(work())

        def cancel(done: concurrent.futures.Future[T]) -> None:  # any thread
            if done.cancelled():
                loop.call_soon_threadsafe(task.cancel)

        def finished(done: asyncio.Task[T]) -> None:  # on litellm's loop
            if done.cancelled():
                future.cancel()
                return
            exc = done.exception()
            try:
                if exc is not None:
                    future.set_exception(exc)
                else:
                    future.set_result(done.result())
                return
            except concurrent.futures.InvalidStateError:  # cancelled by its caller meanwhile
                pass
            if exc is None and lost is not None:
                lost(done.result())

        future.add_done_callback(cancel)
        task.add_done_callback(finished)

    loop.call_soon_threadsafe(begin)
    return future


def _in_background(work: Coroutine[Any, Any, None]) -> None:
    """``work`` as a task of litellm's loop that nobody awaits (called on that loop)."""
    task = asyncio.get_running_loop().create_task(work)
    _unawaited.add(task)
    task.add_done_callback(_unawaited.discard)


class _Chunks:
    """litellm's stream as chat-completions SSE events (usage chunk and ``[DONE]`` included).

    The stream is litellm's, on litellm's loop: each chunk is read, parsed and dumped there
    (``_next``), and only its bytes come back to the caller's loop."""

    def __init__(self, resp: Any, up: Upstream, mark: Trip) -> None:
        self._resp = resp
        self._up = up
        self._mark = mark
        #: litellm's iterator and the task reading its next chunk: litellm's loop's alone
        self._chunks: Any = None
        self._reading: asyncio.Task[Any] | None = None
        self._closing = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        turns = LoopTurns()  # litellm's chunks, as the native paths' events (``split_stream``)
        while (event := await _on_litellm(self._next)) is not None:
            yield event
            await turns.after(len(event))
        yield DONE

    async def _next(self) -> bytes | None:
        """On litellm's loop: the next chunk as an SSE event, None after the last."""
        self._reading = asyncio.current_task()
        try:
            if self._chunks is None:
                self._chunks = self._resp.__aiter__()
            chunk = await self._chunks.__anext__()
            return b"data: " + orjson.dumps(chunk.model_dump(exclude_none=True)) + b"\n\n"
        except StopAsyncIteration:
            return None
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # closed under a reader that did not leave (another task closed the stream): a
            # broken stream to it, as a read of a closed response was, not a cancellation
            raise StreamBroken("the provider's stream was closed") from None
        except Exception as exc:  # litellm raises its own tree mid-stream
            if self._mark.reason is not None:
                raise EventTooLarge(self._mark.reason) from None
            raise StreamBroken(_litellm_error(exc, self._up).message) from None

    async def aclose(self) -> None:
        # Closing litellm's stream wrapper closes its HTTP response: without it, a client that
        # goes away would leave the provider's connection streaming into nothing. Shielded: the
        # close goes on on litellm's loop even if whoever closes is cancelled meanwhile.
        await asyncio.shield(_on_litellm(self._close))

    async def _close(self) -> None:
        """On litellm's loop: stop the read under way (its caller left), then close."""
        self._closing = True
        reading = self._reading
        if reading is not None and not reading.done():
            reading.cancel()
            await asyncio.wait([reading])
        await _close_stream(self._resp)


async def _close_stream(resp: Any) -> None:
    closer = getattr(resp, "aclose", None)
    if closer is not None:
        await closer()


def _close_left(resp: Any) -> None:
    """A stream opened for a client that left before it could have it: closed (on litellm's
    loop, where this is called)."""
    _in_background(_close_stream(resp))


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


#: The HTTP client litellm builds its OpenAI SDK clients around, per bounds (``_sdk_session``):
#: litellm's loop's, touched only there.
_sessions: dict[Bounds, Any] = {}


def _sdk_session(bounds: Bounds) -> Any:
    """The HTTP client for litellm to build its OpenAI SDK clients around (its
    ``aclient_session``: what it serves through the SDK — OpenAI-wire providers, Azure — and
    does not hand ``client=``): routefit's bounded transport, with a cookie jar that keeps
    nothing. litellm keeps one SDK client per provider key and address for every team, and the
    httpx client it would build keeps the cookies a provider's edge sets (api.openai.com's
    ``__cf_bm``): one team's answer's cookie then went out with the next team's request.

    The process's, as litellm's loop is, and closed only at its exit (``_stop``): litellm
    keeps an SDK client an hour (per event loop: the process's one), around the HTTP client it
    was built with, past the generation that built it and past the app too (a retired
    generation's or a stopped app's closed transport would fail the calls of the process's
    other generations and apps until then). Per bounds: a reload's new bounds reach an SDK
    client when it is rebuilt."""
    import httpx

    session = _sessions.get(bounds)
    if session is None:
        session = httpx.AsyncClient(transport=_bounded_transport(bounds), cookies=_no_cookies())
        _sessions[bounds] = session
    return session


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
    """litellm behind the transport seam (its import and loop: ``preload``, this module's).

    What holds connections here (the bounded transports and litellm's clients over them) is
    made, used and closed on litellm's loop: ``_call`` and ``_close`` run there."""

    def __init__(self) -> None:
        #: one bounded transport per deployment bounds (in practice one: the settings'), and
        #: one litellm client per timeout over it (a handler given a client may not pass the
        #: call's timeout on)
        self._transports: dict[Bounds, Any] = {}
        self._clients: dict[tuple[float, Bounds], Any] = {}

    async def aclose(self) -> None:
        if _loop is None:  # litellm never loaded: nothing was made (and nothing is imported)
            return
        await asyncio.shield(_on_litellm(self._close))

    async def _close(self) -> None:
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
        self, litellm: Any, target: Deployment, kwargs: dict[str, Any], mark: Trip, call: str
    ) -> Any:
        """On litellm's loop: ``litellm.acompletion`` (or ``call``: ``aembedding``) over a
        bounded client (a handler's ``client=``, or the SDK clients' ``_sdk_session``), its
        errors mapped."""
        from proxy.transports.bounded_http import trip

        up = target.upstream
        client = self._client(up, target.bounds) if call == "acompletion" else None
        if client is not None:
            kwargs["client"] = client
        elif not _PROXIED:
            litellm.aclient_session = _sdk_session(target.bounds)
        # This task's own context (a copy of the caller's): the bounded transport reads it as
        # the request leaves, and the setting ends with the task.
        trip.set(mark)
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

    async def _whole(
        self, litellm: Any, target: Deployment, kwargs: dict[str, Any], call: str, **dump: Any
    ) -> Completion:
        """On litellm's loop: the call's whole answer, dumped to JSON there (pydantic's work)."""
        from proxy.transports.bounded_http import Trip

        resp = await self._call(litellm, target, kwargs, Trip(), call)
        return _completion(resp, target.upstream, **dump)

    async def send(self, target: Deployment, out: Outbound) -> Completion | EventStream:
        """``out`` (chat) through ``litellm.acompletion``; an embeddings request
        (``proxy.embeddings``) through ``litellm.aembedding``. Each on litellm's loop, the
        caller's waiting for it, free to serve other requests meanwhile (the module's
        docstring)."""
        up = target.upstream
        litellm = await _module()
        kwargs = _kwargs(up, out.body, _steering(litellm))
        if out.headers:  # the headers the gateway adds for the provider (a traceparent)
            kwargs["extra_headers"] = {**kwargs.get("extra_headers", {}), **out.headers}
        whole = functools.partial(self._whole, litellm, target, kwargs)
        if out.wire == EMBEDDINGS:
            # base64 vectors (what the openai SDK asks for) sit in a field typed list[float]
            return await _on_litellm(functools.partial(whole, "aembedding", warnings=False))
        if not out.stream:
            return await _on_litellm(functools.partial(whole, "acompletion"))
        from proxy.transports.bounded_http import Trip

        mark = Trip()
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
        kwargs["timeout"] = up.timeout_for(True)
        opened = functools.partial(self._call, litellm, target, kwargs, mark, "acompletion")
        return _Chunks(await _on_litellm(opened, _close_left), up, mark)


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
