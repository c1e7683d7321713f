"""Chat completions to an Anthropic provider: routefit's own translation over its own client.

A chat client on a Claude route used to go through ``litellm.acompletion``: 5.9 ms added per
request at c1, and litellm's import held ~80 MiB of an idle proxy. This adapter translates the
chat body to a Messages body (``chat_to_messages``), sends it with the HTTP transport it wraps
(the passthrough's pooled aiohttp client, or an injected ``MockTransport``: same endpoint, auth,
timeouts and error mapping as the Anthropic wire's passthrough) and translates the answer back
(``messages_to_chat``). A request the mapping does not cover (``Unmapped``: structured output,
reasoning effort, audio, ...) goes to litellm, which is then imported on first use — so a
config whose Claude routes need nothing else never imports litellm at all.

The provider table (``proxy.providers``) sends chat here for deployments on the ``anthropic``
transport whose ``litellm_params`` carry nothing for litellm (``Adapter.CHAT_TO_MESSAGES``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import cache

import orjson

from proxy.errors import ProxyError
from proxy.exchange import (
    MESSAGES,
    UNREADABLE,
    Completion,
    EventStream,
    Outbound,
    StreamBroken,
    as_completion,
    as_stream,
)
from proxy.exchange.sse import DONE, event_data, is_done
from proxy.modelmap import lookup
from proxy.providers import Deployment, Transport
from proxy.transports.chat_to_messages import Unmapped, messages_body
from proxy.transports.messages_to_chat import MessagesToChat, chat_completion

__all__ = ["AnthropicChat"]

#: What litellm sends when neither the client nor the model map names an output limit.
_FALLBACK_MAX_TOKENS = 4096


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
            if is_done(data):
                break  # not Anthropic's, but an end all the same: no more answer comes
            try:
                parsed = orjson.loads(data)
            except orjson.JSONDecodeError:
                raise StreamBroken("the provider sent a malformed event") from None
            if not isinstance(parsed, dict):
                continue
            try:
                chunks = mapper.event(parsed)
            except UNREADABLE:  # a field of the wrong type: as malformed as bad JSON
                raise StreamBroken(
                    "the provider sent an event of a shape it does not promise"
                ) from None
            for chunk in chunks:
                yield chunk
            if mapper.error is not None:
                raise StreamBroken(mapper.error)
        if mapper.stopped:
            yield DONE

    async def aclose(self) -> None:
        await self._events.aclose()


class AnthropicChat:
    """The chat wire to Anthropic providers: own mapping over ``http``, ``litellm`` as the
    fallback for what the mapping does not cover. Owns neither (each is closed by its owner)."""

    def __init__(self, http: Transport, litellm: Transport) -> None:
        self._http = http
        self._litellm = litellm

    async def aclose(self) -> None:
        return None

    async def send(self, target: Deployment, out: Outbound) -> Completion | EventStream:
        try:
            body = messages_body(out.body, _default_max_tokens(target.upstream.model_name))
        except Unmapped:
            return await self._litellm.send(target, out)
        answer = await self._http.send(target, Outbound(MESSAGES, body, out.headers, out.stream))
        if out.stream:
            return _ChatEvents(as_stream(answer))
        message = as_completion(answer).data
        try:
            if not isinstance(message, dict) or not isinstance(message.get("content"), list):
                raise ValueError("not a Messages answer")  # no message to translate: no answer
            data = chat_completion(message)
            return Completion(orjson.dumps(data), data)
        except UNREADABLE:  # a shape it does not promise, or a count beyond 64 bits once added
            raise ProxyError(
                502,
                f"upstream {target.upstream.model} returned a response routefit cannot read",
                code="upstream_malformed",
            ) from None
