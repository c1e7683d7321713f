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
worker would hold the same memory from then on.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from proxy.config import Upstream
from proxy.errors import ProxyError
from proxy.transports.base import CHAT, Completion, Outbound, StreamBroken, Transient
from proxy.transports.provider_errors import RETRY_STATUSES, redact, retry_after
from proxy.transports.sse import DONE

__all__ = ["LiteLLM"]

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_CHAT_ONLY = frozenset({CHAT})


def _import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = importlib.import_module("litellm")
    setattr(litellm, "telemetry", False)  # noqa: B010 - no network calls of its own
    setattr(litellm, "suppress_debug_info", True)  # noqa: B010
    return litellm


class _Chunks:
    """litellm's stream as chat-completions SSE events (usage chunk and ``[DONE]`` included)."""

    def __init__(self, resp: Any, up: Upstream) -> None:
        self._resp = resp
        self._up = up

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp:
                yield b"data: " + orjson.dumps(chunk.model_dump(exclude_none=True)) + b"\n\n"
        except Exception as exc:  # litellm raises its own tree mid-stream
            raise StreamBroken(_litellm_error(exc, self._up).message) from None
        yield DONE

    async def aclose(self) -> None:
        # Closing litellm's stream wrapper closes its HTTP response: without it, a client that
        # goes away would leave the provider's connection streaming into nothing.
        closer = getattr(self._resp, "aclose", None)
        if closer is not None:
            await closer()


class LiteLLM:
    """litellm behind the transport seam; imported lazily, in a thread."""

    def __init__(self, needed: bool) -> None:
        self.needed = needed
        self._litellm: Any = None
        self._loading: asyncio.Task[Any] | None = None

    def speaks(self, up: Upstream) -> frozenset[str]:
        return _CHAT_ONLY

    def start(self) -> None:
        """Begin importing litellm in a thread when a route needs it (start-up stays fast)."""
        if self.needed and self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(
                asyncio.to_thread(_import_litellm)
            )

    @property
    def ready(self) -> bool:
        loading = self._loading
        return (
            not self.needed
            or self._litellm is not None
            or (loading is not None and loading.done() and not loading.exception())
        )

    async def module(self) -> Any:
        if self._litellm is None:
            if self._loading is None:
                self._loading = asyncio.get_running_loop().create_task(
                    asyncio.to_thread(_import_litellm)
                )
            self._litellm = await self._loading
        return self._litellm

    async def aclose(self) -> None:
        return None

    async def complete(self, up: Upstream, out: Outbound) -> Completion:
        litellm = await self.module()
        try:
            resp = await litellm.acompletion(**_kwargs(up, out.body))
        except Exception as exc:  # litellm raises its own exception tree; map it
            raise _litellm_error(exc, up) from None
        data = resp.model_dump(exclude_none=True)
        return Completion(orjson.dumps(data), data)

    async def stream(self, up: Upstream, out: Outbound) -> _Chunks:
        litellm = await self.module()
        kwargs = _kwargs(up, out.body)
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
        try:
            resp = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise _litellm_error(exc, up) from None
        return _Chunks(resp, up)


def _kwargs(up: Upstream, body: Mapping[str, Any]) -> dict[str, Any]:
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


def _litellm_error(exc: Exception, up: Upstream) -> ProxyError:
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    message = redact(str(getattr(exc, "message", None) or exc), up.api_key)
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
