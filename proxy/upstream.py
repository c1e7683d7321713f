"""The upstream: the only module that knows litellm.

Two transports behind one interface:

``openai``
    For providers that already speak OpenAI's wire format (OpenAI, DeepSeek, vLLM, llama.cpp,
    OpenRouter, any ``api_base`` serving ``/chat/completions``): the client's body goes out over
    one pooled ``httpx.AsyncClient`` with only ``model`` and ``messages`` rewritten and every
    other field kept; the provider's bytes come back unchanged. No translation, no per-call cost.
``litellm``
    For providers that need translation (Anthropic, Gemini, Bedrock, ...): ``litellm.acompletion``.
    litellm costs seconds to import, so it is imported in the background at start-up only when a
    configured route needs it, never on the passthrough path.

Both report the provider's usage (normalised by ``proxy.usage``) and map failures to
``ProxyError`` with the provider's status where it has one.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy.config import Upstream
from proxy.errors import ProxyError
from proxy.usage import Usage, normalize_usage

__all__ = ["Completion", "UpstreamStream", "Upstreams"]

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_DONE = b"data: [DONE]\n\n"


@dataclass(slots=True)
class Completion:
    body: bytes
    usage: Usage | None
    headers: dict[str, str] = field(default_factory=dict)


def _upstream_error(status: int, content: bytes, headers: Mapping[str, str]) -> ProxyError:
    """The provider's error, passed through with its status, message and Retry-After."""
    message = f"upstream returned HTTP {status}"
    code = param = kind = None
    try:
        data = orjson.loads(content)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            message = str(err.get("message") or message)
            code, param, kind = err.get("code"), err.get("param"), err.get("type")
        elif isinstance(err, str):
            message = err
        elif isinstance(data, dict) and isinstance(data.get("message"), str):
            message = data["message"]
    except orjson.JSONDecodeError:
        text = content[:300].decode("utf-8", "replace").strip()
        if text:
            message = f"{message}: {text}"
    passed = {k: v for k, v in headers.items() if k.lower() in ("retry-after", "x-request-id")}
    return ProxyError(
        status,
        message,
        code=str(code) if code is not None else None,
        param=str(param) if param is not None else None,
        type=str(kind) if kind is not None else None,
        headers=passed,
    )


def _error_event(message: str, code: str = "upstream_error") -> bytes:
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + orjson.dumps(body) + b"\n\n"


class UpstreamStream:
    """An SSE stream being relayed; ``usage`` is known once it has been consumed.

    ``events`` is set by the transport right after construction: the generator needs the
    stream object to report usage and completion into.
    """

    def __init__(self, closer: Any = None) -> None:
        self.events: AsyncGenerator[bytes, None]
        self._closer = closer
        self.usage: Usage | None = None
        self.completed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.events

    async def aclose(self) -> None:
        if self._closer is not None:
            await self._closer()


def _split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events (with their terminator) and the incomplete rest."""
    events: list[bytes] = []
    while True:
        a = buffer.find(b"\n\n")
        b = buffer.find(b"\r\n\r\n")
        if a < 0 and b < 0:
            return events, buffer
        end = b + 4 if b >= 0 and (a < 0 or b < a) else a + 2
        events.append(buffer[:end])
        buffer = buffer[end:]


def _event_data(event: bytes) -> bytes | None:
    lines = [line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


class Upstreams:
    """The transports of one app: a pooled HTTP client and, when needed, litellm."""

    def __init__(self, needs_litellm: bool, max_connections: int = 512) -> None:
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(600.0, connect=10.0),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            follow_redirects=False,
            trust_env=False,
        )
        self.needs_litellm = needs_litellm
        self._litellm: Any = None
        self._loading: asyncio.Task[Any] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Begin importing litellm in a thread when a route needs it (start-up stays fast)."""
        if self.needs_litellm and self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(
                asyncio.to_thread(_import_litellm)
            )

    @property
    def ready(self) -> bool:
        return (
            not self.needs_litellm
            or self._litellm is not None
            or (
                self._loading is not None and self._loading.done() and not self._loading.exception()
            )
        )

    async def litellm(self) -> Any:
        if self._litellm is None:
            if self._loading is None:
                self._loading = asyncio.get_running_loop().create_task(
                    asyncio.to_thread(_import_litellm)
                )
            self._litellm = await self._loading
        return self._litellm

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- OpenAI-compatible passthrough -----------------------------------------------------

    def _request(self, up: Upstream, body: Mapping[str, Any]) -> httpx.Request:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if up.api_key:
            headers["authorization"] = f"Bearer {up.api_key}"
        payload = dict(body)
        payload["model"] = up.model_name
        return self.client.build_request(
            "POST",
            f"{up.api_base}/chat/completions",
            content=orjson.dumps(payload),
            headers=headers,
            timeout=httpx.Timeout(up.timeout, connect=min(10.0, up.timeout)),
        )

    async def complete(self, up: Upstream, body: Mapping[str, Any]) -> Completion:
        if up.transport == "litellm":
            return await self._litellm_complete(up, body)
        try:
            resp = await self.client.send(self._request(up, body))
        except httpx.TimeoutException:
            raise ProxyError(
                504, f"upstream {up.model} timed out", code="upstream_timeout"
            ) from None
        except httpx.TransportError as exc:
            raise ProxyError(
                502,
                f"upstream {up.model} is unreachable: {type(exc).__name__}",
                code="upstream_unreachable",
            ) from None
        if resp.status_code >= 400:
            raise _upstream_error(resp.status_code, resp.content, resp.headers)
        try:
            data = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            raise ProxyError(
                502, f"upstream {up.model} returned a malformed response", code="upstream_malformed"
            ) from None
        usage = normalize_usage(data.get("usage")) if isinstance(data, dict) else None
        return Completion(resp.content, usage)

    async def stream(
        self, up: Upstream, body: Mapping[str, Any], client_wants_usage: bool
    ) -> UpstreamStream:
        """Open a stream; errors before the first byte raise ProxyError (a proper status)."""
        if up.transport == "litellm":
            return await self._litellm_stream(up, body, client_wants_usage)
        payload = dict(body)
        options = dict(payload.get("stream_options") or {})
        options["include_usage"] = True
        payload["stream_options"] = options
        try:
            resp = await self.client.send(self._request(up, payload), stream=True)
        except httpx.TimeoutException:
            raise ProxyError(
                504, f"upstream {up.model} timed out", code="upstream_timeout"
            ) from None
        except httpx.TransportError as exc:
            raise ProxyError(
                502,
                f"upstream {up.model} is unreachable: {type(exc).__name__}",
                code="upstream_unreachable",
            ) from None
        if resp.status_code >= 400:
            content = await resp.aread()
            await resp.aclose()
            raise _upstream_error(resp.status_code, content, resp.headers)
        stream = UpstreamStream(resp.aclose)
        stream.events = self._relay(resp, stream, client_wants_usage)
        return stream

    async def _relay(
        self, resp: httpx.Response, stream: UpstreamStream, client_wants_usage: bool
    ) -> AsyncGenerator[bytes, None]:
        buffer = b""
        try:
            async for chunk in resp.aiter_raw():
                buffer += chunk
                events, buffer = _split_events(buffer)
                for event in events:
                    out = self._inspect(event, stream, client_wants_usage)
                    if out:
                        yield out
            if not stream.completed:
                yield _error_event("the upstream stream ended before it was complete")
        except httpx.HTTPError as exc:
            yield _error_event(f"the upstream stream failed: {type(exc).__name__}")
        finally:
            await resp.aclose()

    @staticmethod
    def _inspect(event: bytes, stream: UpstreamStream, client_wants_usage: bool) -> bytes:
        """Capture usage from an event; drop or trim it when the client did not ask for it."""
        data = _event_data(event)
        if data is None:
            return event
        if data.strip() == b"[DONE]":
            stream.completed = True
            return event
        if b'"usage"' not in data:
            return event
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return event
        if not isinstance(obj, dict) or obj.get("usage") is None:
            return event
        stream.usage = normalize_usage(obj["usage"]) or stream.usage
        if client_wants_usage:
            return event
        if not obj.get("choices"):
            return b""  # the usage-only chunk the client did not ask for
        del obj["usage"]
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    # -- litellm ---------------------------------------------------------------------------

    def _litellm_kwargs(self, up: Upstream, body: Mapping[str, Any]) -> dict[str, Any]:
        kwargs = {k: v for k, v in body.items() if k not in ("model", "stream", "stream_options")}
        kwargs.update(up.extra)
        kwargs["model"] = up.model
        if up.api_base:
            kwargs["api_base"] = up.api_base
        if up.api_key:
            kwargs["api_key"] = up.api_key
        kwargs["timeout"] = up.timeout
        kwargs.setdefault("num_retries", 0)
        return kwargs

    async def _litellm_complete(self, up: Upstream, body: Mapping[str, Any]) -> Completion:
        litellm = await self.litellm()
        try:
            resp = await litellm.acompletion(**self._litellm_kwargs(up, body))
        except Exception as exc:  # litellm raises its own exception tree; map it
            raise _litellm_error(exc, up) from None
        data = resp.model_dump(exclude_none=True)
        return Completion(orjson.dumps(data), normalize_usage(data.get("usage")))

    async def _litellm_stream(
        self, up: Upstream, body: Mapping[str, Any], client_wants_usage: bool
    ) -> UpstreamStream:
        litellm = await self.litellm()
        kwargs = self._litellm_kwargs(up, body)
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
        try:
            resp = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise _litellm_error(exc, up) from None
        stream = UpstreamStream()

        async def events() -> AsyncGenerator[bytes, None]:
            try:
                async for chunk in resp:
                    data = chunk.model_dump(exclude_none=True)
                    usage = data.get("usage")
                    if usage:
                        stream.usage = normalize_usage(usage) or stream.usage
                        if not client_wants_usage:
                            if not data.get("choices"):
                                continue
                            del data["usage"]
                    yield b"data: " + orjson.dumps(data) + b"\n\n"
                stream.completed = True
                yield _DONE
            except Exception as exc:  # a failure mid-stream ends the stream with an error event
                yield _error_event(f"the upstream stream failed: {_litellm_error(exc, up).message}")

        stream.events = events()
        return stream


def _import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = importlib.import_module("litellm")
    setattr(litellm, "telemetry", False)  # noqa: B010 - no network calls of its own
    setattr(litellm, "suppress_debug_info", True)  # noqa: B010
    return litellm


def _litellm_error(exc: Exception, up: Upstream) -> ProxyError:
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    message = str(getattr(exc, "message", None) or exc)
    if name == "ContextWindowExceededError":
        return ProxyError(400, message, code="context_length_exceeded")
    if name == "Timeout" or "Timeout" in name:
        return ProxyError(504, f"upstream {up.model} timed out", code="upstream_timeout")
    if name in ("APIConnectionError", "ServiceUnavailableError") and not isinstance(status, int):
        return ProxyError(502, f"upstream {up.model} is unreachable: {message}")
    if isinstance(status, int) and 400 <= status < 600:
        headers = {}
        response = getattr(exc, "response", None)
        retry = getattr(response, "headers", {}).get("retry-after") if response else None
        if retry:
            headers["retry-after"] = str(retry)
        return ProxyError(status, message, headers=headers)
    return ProxyError(502, f"upstream {up.model} failed: {name}: {message}")
