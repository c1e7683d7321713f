"""Chat completions to an Anthropic provider over routefit's own HTTP client.

A chat client on a Claude route used to go through ``litellm.acompletion``: 5.9 ms added per
request at c1, and litellm's import held ~80 MiB of an idle proxy. This transport translates the
chat body to a Messages body (``chat_to_messages``), sends it with the passthrough's pooled
aiohttp client (same endpoint, auth, timeouts and error mapping as the Anthropic wire's
passthrough) and translates the answer back (``messages_to_chat``). A request the mapping does
not cover (``Unmapped``: structured output, reasoning effort, audio, ...) goes to litellm, which
is then imported on first use — so a config whose Claude routes need nothing else never imports
litellm at all.

It covers routes whose provider is ``anthropic`` and whose ``litellm_params`` carry nothing for
litellm (``Upstream.extra`` empty); anything else stays on litellm as before (``covers``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import cache

import orjson

from proxy.config import Upstream
from proxy.modelmap import lookup
from proxy.transports.base import CHAT, MESSAGES, Completion, EventStream, Outbound, StreamBroken
from proxy.transports.chat_to_messages import Unmapped, messages_body
from proxy.transports.litellm import LiteLLM
from proxy.transports.messages_to_chat import MessagesToChat, chat_completion
from proxy.transports.passthrough import Passthrough
from proxy.transports.sse import DONE, event_data

__all__ = ["AnthropicChat", "covers"]

_CHAT_ONLY = frozenset({CHAT})
#: What litellm sends when neither the client nor the model map names an output limit.
_FALLBACK_MAX_TOKENS = 4096


def covers(up: Upstream) -> bool:
    """Whether this transport carries chat requests for ``up`` (else litellm does)."""
    return up.provider == "anthropic" and up.transport == "litellm" and not up.extra


@cache
def _default_max_tokens(model: str) -> int:
    """The model's output limit, as litellm would send it when the client named none."""
    found = lookup(model, "anthropic").get("max_output_tokens")
    return found if isinstance(found, int) and found > 0 else _FALLBACK_MAX_TOKENS


class _ChatEvents:
    """An Anthropic event stream read as chat-completions SSE events."""

    def __init__(self, events: EventStream) -> None:
        self._events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        mapper = MessagesToChat()
        async for event in self._events:
            data = event_data(event)
            if not data:
                continue
            try:
                parsed = orjson.loads(data)
            except orjson.JSONDecodeError:
                raise StreamBroken("the provider sent a malformed event") from None
            if not isinstance(parsed, dict):
                continue
            for chunk in mapper.event(parsed):
                yield chunk
            if mapper.error is not None:
                raise StreamBroken(mapper.error)
        if mapper.stopped:
            yield DONE

    async def aclose(self) -> None:
        await self._events.aclose()


class AnthropicChat:
    """The chat wire to Anthropic providers: own mapping, own client, litellm as the fallback."""

    def __init__(self, passthrough: Passthrough, litellm: LiteLLM) -> None:
        self._passthrough = passthrough
        self._litellm = litellm

    def speaks(self, up: Upstream) -> frozenset[str]:
        return _CHAT_ONLY

    def start(self) -> None:
        return None  # the passthrough and litellm are started by their own legs

    @property
    def ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None

    def _messages(self, up: Upstream, out: Outbound) -> Outbound | None:
        try:
            body = messages_body(out.body, _default_max_tokens(up.model_name))
        except Unmapped:
            return None
        return Outbound(MESSAGES, body, out.headers, out.stream)

    async def complete(self, up: Upstream, out: Outbound) -> Completion:
        native = self._messages(up, out)
        if native is None:
            return await self._litellm.complete(up, out)
        answer = await self._passthrough.complete(up, native)
        data = chat_completion(answer.data)
        return Completion(orjson.dumps(data), data)

    async def stream(self, up: Upstream, out: Outbound) -> EventStream:
        native = self._messages(up, out)
        if native is None:
            return await self._litellm.stream(up, out)
        return _ChatEvents(await self._passthrough.stream(up, native))
