"""A provider's HTTP exchange, whatever client performs it: the request a deployment's table
entry asks for, and what its response means.

Two clients share this: the passthrough's aiohttp session (``proxy.transports.passthrough``,
the socket) and ``proxy.transports.mock`` (an httpx-style handler, in process). Each reduces
its response to ``RawResponse`` — a status, headers and a byte iterator whose failures are
``ReadBroken`` or ``TimeoutError`` — and hands it to ``interpret``, so a test through the mock
meets the very rules the passthrough applies: an error status is the provider's error
(``upstream_error``, keys scrubbed); a whole answer is bounded
(the deployment's ``Bounds``: 502 ``upstream_too_large``) and must be a JSON object
(502 ``upstream_malformed``); a stream is re-cut into complete SSE events, each bounded
(``max_event``), over at its wire's end marker (``Events``; Gemini's: its last chunk, then a
quiet body), and a break after it started is ``StreamBroken``; JSON sent back for a stream
is no stream (502 ``upstream_malformed``). An error body is read only as far as its message
can matter (``ERROR_BODY_BYTES``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import orjson

from proxy.errors import ProxyError
from proxy.exchange import (
    CHAT,
    GEMINI,
    MESSAGES,
    RESPONSES,
    Completion,
    EventStream,
    Outbound,
    StreamBroken,
)
from proxy.exchange.sse import MAX_EVENT_BYTES, event_data, is_done, split_stream
from proxy.fairness import THREAD_ABOVE
from proxy.providers import Deployment, gemini_url
from proxy.transports.provider_errors import (
    account_figures_hidden,
    rate_limited,
    redact,
    upstream_error,
)

__all__ = [
    "END_GRACE_SECONDS",
    "ERROR_BODY_BYTES",
    "ProviderRequest",
    "RawResponse",
    "ReadBroken",
    "StreamBody",
    "interpret",
    "provider_request",
]

#: An error body past this is cut (its message is near the start); it is never an answer.
ERROR_BODY_BYTES = 64 * 1024
#: How long a stream's body may go on after the provider's end marker before its connection is
#: dropped rather than pooled (a well-behaved provider ends it in the same breath).
END_GRACE_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    """One POST to a deployment, as its table entry says to make it."""

    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def provider_request(target: Deployment, out: Outbound) -> ProviderRequest:
    """The fitted body with only ``model`` rewritten to the provider's name, to the endpoint of
    ``out.wire``, with the deployment's auth and the client's forwarded headers. Gemini names
    its model (and whether it streams) in the URL: its body goes exactly as the wire wrote it."""
    headers = {"content-type": "application/json", "accept": "application/json"}
    headers.update(target.auth.headers(target.upstream.api_key))
    headers.update(out.headers)
    if out.wire == GEMINI:
        return ProviderRequest(gemini_url(target, out.stream), orjson.dumps(out.body), headers)
    payload: dict[str, Any] = dict(out.body)
    payload["model"] = target.upstream.model_name
    return ProviderRequest(target.urls[out.wire], orjson.dumps(payload), headers)


class ReadBroken(Exception):
    """The response's bytes stopped coming (the client library's error, by name)."""


class BodyTooLarge(Exception):
    """A provider's body ran past its bound."""


class StreamBody(Protocol):
    """What ``Events`` reads: a body as it arrives, and how to be done with it (litellm's
    bounded client hands its httpx bodies over too: ``proxy.transports.litellm``)."""

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def finish(self, whole: bool) -> None: ...


class RawResponse(Protocol):
    """A provider's response once its headers arrived, its body unread."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def content_length(self) -> int | None: ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; ``ReadBroken`` or ``TimeoutError`` when it stops."""

    def at_eof(self) -> bool: ...

    async def whole(self) -> bytes:
        """The body at once, when its announced length is known, unencoded and within the
        bound (``read_bounded``): the HTTP parser reads no byte past that length."""

    async def finish(self, whole: bool) -> None:
        """Done with it: read to its end (``whole``: the connection may be reused) or cut short
        (the connection is dropped)."""


async def read_bounded(raw: RawResponse, limit: int) -> bytes:
    """The whole body, or ``BodyTooLarge`` as soon as it (or its announced length) is over
    ``limit``: nothing past the bound is buffered."""
    length = raw.content_length
    if length is not None:
        if length > limit:
            raise BodyTooLarge
        # an encoded body's length is not what it inflates to: that one is counted as it comes
        if raw.headers.get("content-encoding", "identity").lower() == "identity":
            return await raw.whole()
    parts: list[bytes] = []
    size = 0
    async for chunk in raw.chunks():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        parts.append(chunk)
    return b"".join(parts)


async def read_prefix(raw: RawResponse, limit: int) -> bytes:
    """At most the first ``limit`` bytes of the body (the rest is dropped with the connection)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in raw.chunks():
        parts.append(chunk[: limit - size])
        size += len(parts[-1])
        if size >= limit:
            break
    return b"".join(parts)


def _named(event: bytes, names: frozenset[bytes]) -> bool:
    """Whether ``event``'s ``event:`` line (its first, as Anthropic and OpenAI write it) is one
    of ``names``; read from the first line only, however it is ended."""
    if not event.startswith(b"event:"):
        return False
    end = event.find(b"\n")
    return event[6 : end if end >= 0 else None].partition(b"\r")[0].strip() in names


def _chat_end(event: bytes) -> bool:
    return b"[DONE]" in event and is_done(event_data(event))


_MESSAGES_ENDS = frozenset({b"message_stop", b"error"})
_RESPONSES_ENDS = frozenset(
    {b"response.completed", b"response.incomplete", b"response.failed", b"error"}
)

#: Per provider wire, whether an event is the provider's last (its end marker or its own error
#: event); Gemini has none (``_GeminiEnd``).
_LAST: dict[str, Callable[[bytes], bool]] = {
    CHAT: _chat_end,
    MESSAGES: lambda event: _named(event, _MESSAGES_ENDS),
    RESPONSES: lambda event: _named(event, _RESPONSES_ENDS),
}


class _GeminiEnd:
    """Whether a Gemini stream's event looks like its last: Gemini (``streamGenerateContent
    ?alt=sse``) writes no end marker, its stream ends with its body.

    Google's ``GenerateContentResponse`` reference (ai.google.dev/api/generate-content) says a
    candidate's ``finishReason`` is set once the model stopped ("if empty, the model has not
    stopped generating", Vertex AI's inference reference), and ``usageMetadata`` holds the
    totals of the answer; its streams put both on the last chunk. Neither alone is proof of
    the end: the usage comes on every chunk in Gemini 2.x (the prompt's count), the finish
    reason came on every chunk in Gemini 1.0 (google-gemini/deprecated-generative-ai-python
    #351) and some proxies before Gemini still write it so, with several candidates one may
    finish before another, and a client library may meet the usage in a chunk of its own after
    the finishing one (agentjido/req_llm#638, maximhq/bifrost#422). So the end is inferred
    only from both: every candidate of a chunk stated its ``finishReason`` (or the prompt was
    blocked: ``promptFeedback.blockReason``), and ``usageMetadata`` came with that chunk or
    after it; a Gemini ``error`` chunk is the provider's end too. ``Events`` then still waits
    ``END_GRACE_SECONDS`` for the body: what comes in that time is relayed and the end looked
    for again, so only a body that goes quiet after such a chunk is ended by routefit."""

    def __init__(self) -> None:
        self._finished = False

    def __call__(self, event: bytes) -> bool:
        if not (self._finished or b"finishReason" in event or b"error" in event):
            return False  # the common chunk: no JSON parsed
        try:
            data = orjson.loads(event_data(event) or b"null")
        except orjson.JSONDecodeError:
            return False
        if not isinstance(data, dict):
            return False
        if "error" in data:
            return True
        if _all_finished(data):
            self._finished = True
        return self._finished and isinstance(data.get("usageMetadata"), dict)


def _all_finished(chunk: dict[str, Any]) -> bool:
    """Every candidate of ``chunk`` states its finish reason, or its prompt was blocked."""
    feedback = chunk.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        return True
    candidates = chunk.get("candidates")
    return (
        isinstance(candidates, list)
        and bool(candidates)
        and all(isinstance(c, dict) and c.get("finishReason") for c in candidates)
    )


class Events:
    """A provider's SSE response as complete events; a break raises ``StreamBroken``.

    The stream is over at the provider's end marker (``wire``'s, when it has one), not when
    the body ends: a provider (or a proxy before it) that holds the body open after
    ``[DONE]`` would otherwise hold the client's stream open until the read timeout and then
    end it with an error after a complete answer. What comes after the marker is no answer:
    ``aclose`` reads it away (``END_GRACE_SECONDS`` at most) so that the connection can be
    pooled, and drops the connection if it does not end.

    Gemini has no marker: after an event that looks like its last (``_GeminiEnd``) the next one
    must come within ``END_GRACE_SECONDS``. The body's end ends the stream as ever; a body
    still open and quiet by then is over (its connection dropped), and so is one that breaks
    then (the answer was whole); an event that does come is relayed like any other, so a
    stream that still has content to come is never cut."""

    def __init__(
        self, raw: StreamBody, max_event: int = MAX_EVENT_BYTES, wire: str | None = None
    ) -> None:
        self._raw = raw
        self._max_event = max_event
        self._last = _LAST.get(wire or "")
        self._looks_last = _GeminiEnd() if wire == GEMINI else None
        #: The body's chunks after the provider's end marker (None: it was not seen).
        self._after: AsyncIterator[bytes] | None = None
        self._done = False
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._raw.chunks()
        events = split_stream(chunks, self._max_event)
        quiet = False  # the last event looked like the end: the next must come soon
        try:
            while (event := await self._next(events, quiet)) is not None:
                yield event
                if self._last is not None and self._last(event):
                    self._after = chunks
                    return
                quiet = self._looks_last is not None and self._looks_last(event)
        except (ReadBroken, TimeoutError) as exc:
            raise StreamBroken(str(exc) or type(exc).__name__) from None
        finally:
            await events.aclose()

    async def aclose(self) -> None:
        # A stream read to its end goes back to the pool; one cut short must not.
        if not self._closed:
            self._closed = True
            if self._after is not None:
                self._done = await _ends_soon(self._after)
            await self._raw.finish(self._done)

    async def _next(self, events: AsyncIterator[bytes], quiet: bool) -> bytes | None:
        """The next event; None once the stream is over (``_done`` when its body ended).
        ``quiet``: the last event looked like the end, and the next must come within
        ``END_GRACE_SECONDS`` (a break meanwhile is the end too: the answer was whole)."""
        if not quiet:
            try:
                return await anext(events)
            except StopAsyncIteration:
                self._done = True
                return None
        with anyio.move_on_after(END_GRACE_SECONDS):
            try:
                return await self._next(events, False)
            except (ReadBroken, TimeoutError):
                return None
        return None


async def _ends_soon(chunks: AsyncIterator[bytes]) -> bool:
    """Whether the body after the end marker ends within ``END_GRACE_SECONDS`` (read and
    dropped: it is no answer, and a failure to read it only means the connection is not
    reused, whatever the client library raised: litellm's reads raise httpx's errors)."""
    with anyio.move_on_after(END_GRACE_SECONDS):
        try:
            async for _ in chunks:
                pass
        except Exception:
            return False
        return True
    return False


async def refuse_error_status(raw: RawResponse, target: Deployment) -> None:
    """An error status is the provider's error (``Transient`` for 429/502/503/504)."""
    if raw.status < 400:
        return
    try:
        content = await read_prefix(raw, ERROR_BODY_BYTES)
    except (ReadBroken, TimeoutError):
        content = b""
    finally:
        # read to its end: back to the pool; cut at the bound: dropped
        await raw.finish(raw.at_eof())
    raise upstream_error(raw.status, content, raw.headers, target.upstream.api_key)


#: What every whole answer of a provider wire holds (any one of): a 200 without it is no answer
#: (a provider that answers its failure with a 200 and an ``error`` object, or anything else).
_ANSWER_KEYS: dict[str, tuple[tuple[str, type], ...]] = {
    CHAT: (("choices", list),),
    MESSAGES: (("content", list),),
    RESPONSES: (("output", list),),
    # a blocked prompt: its feedback only; an answer without candidates: its usage at least
    GEMINI: (("candidates", list), ("promptFeedback", dict), ("usageMetadata", dict)),
}


def _not_an_answer(
    data: dict[str, Any],
    model: str,
    secret: str | None,
    what: str = "returned a malformed response",
) -> ProxyError:
    """The 502 of a 200 whose JSON object is not its wire's answer (``what`` it did instead),
    naming the provider's own error message when it sent one."""
    message = f"upstream {model} {what}"
    err = data.get("error")
    said = err.get("message") if isinstance(err, dict) else err
    if isinstance(said, str) and said:
        said = redact(said[:300], secret)
        if rate_limited(err):  # the shared account's figures, as a 429's (docs/security.md)
            said = account_figures_hidden(said)
        message = f"{message}: an error with status 200: {said}"
    return ProxyError(502, message, code="upstream_malformed")


async def refuse_whole_answer(raw: RawResponse, target: Deployment) -> None:
    """A stream asked for and JSON sent back (a provider, or a proxy before it, that ignores
    ``stream``, or one that reports its failure as a JSON 200) is no stream: a 502
    ``upstream_malformed`` saying so, with the provider's own error message when it sent one
    (read as far as it can matter: ``ERROR_BODY_BYTES``). Without this, its events were looked
    for in the JSON, none found, and the client told the stream "ended before its first event"."""
    kind = raw.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/json":
        return
    try:
        content = await read_prefix(raw, ERROR_BODY_BYTES)
    except (ReadBroken, TimeoutError):
        content = b""
    finally:
        await raw.finish(raw.at_eof())
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        data = None
    found = data if isinstance(data, dict) else {}
    up = target.upstream
    raise _not_an_answer(found, up.model, up.api_key, "answered a stream request with JSON")


async def _decoded(content: bytes) -> Any:
    """``content`` as JSON: off the loop when it is big (``proxy.fairness.THREAD_ABOVE``, as a
    client's body): orjson reads ~200-500 MB/s, and a 64 MiB answer
    (``max_provider_body_bytes``' default) held the event loop a few hundred ms."""
    if len(content) > THREAD_ABOVE:
        return await anyio.to_thread.run_sync(orjson.loads, content)
    return orjson.loads(content)


async def completion(
    raw: RawResponse, target: Deployment, max_body: int, wire: str | None = None
) -> Completion:
    """The whole answer, bounded and parsed (``wire``: the provider wire whose answer it must
    be); its failures are never retried (the provider had the request)."""
    model = target.upstream.model
    try:
        content = await read_bounded(raw, max_body)
    except BodyTooLarge:
        await raw.finish(False)
        raise ProxyError(
            502,
            f"upstream {model} sent an answer over {max_body:,} bytes "
            "(routefit_settings.max_provider_body_bytes)",
            code="upstream_too_large",
        ) from None
    except TimeoutError:
        await raw.finish(False)
        raise ProxyError(504, f"upstream {model} timed out", code="upstream_timeout") from None
    except ReadBroken as exc:  # the response started: never retried
        await raw.finish(False)
        raise ProxyError(
            502, f"upstream {model} broke off its response: {exc}", code="upstream_incomplete"
        ) from None
    await raw.finish(True)
    try:
        data = await _decoded(content)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        # every provider wire's answer is a JSON object: a list, a string, a number or null
        # (or no JSON at all) is no answer, never relayed as one
        raise ProxyError(
            502, f"upstream {model} returned a malformed response", code="upstream_malformed"
        )
    keys = _ANSWER_KEYS.get(wire or "")
    if keys is not None and not any(isinstance(data.get(k), kind) for k, kind in keys):
        raise _not_an_answer(data, model, target.upstream.api_key)
    return Completion(content, data)


async def interpret(
    raw: RawResponse, target: Deployment, out: Outbound
) -> Completion | EventStream:
    """What ``raw`` means for ``out``: the provider's error, its whole answer, or its events
    (bounded by ``target.bounds``)."""
    await refuse_error_status(raw, target)
    if out.stream:
        await refuse_whole_answer(raw, target)
        return Events(raw, target.bounds.max_event, out.wire)
    return await completion(raw, target, target.bounds.max_body, out.wire)
