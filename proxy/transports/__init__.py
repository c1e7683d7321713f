"""Provider transports: the outgoing seam (see ``proxy.transports.base``).

``Transports`` is the set one app uses, chosen once from the config: the passthrough for
providers that speak a wire natively, routefit's own chat→Messages translation for Anthropic
providers, litellm for the rest, each wrapped in bounded retries. litellm is imported only when
a configured route needs it.
``route_plan`` answers, once per (route, client wire), which transport carries the request and
in which provider wire.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from proxy.config import Upstream
from proxy.transports.anthropic import AnthropicChat, covers
from proxy.transports.base import (
    CHAT,
    MESSAGES,
    RESPONSES,
    Completion,
    EventStream,
    Outbound,
    StreamBroken,
    Transient,
    Transport,
)
from proxy.transports.litellm import LiteLLM
from proxy.transports.passthrough import MAX_BODY_BYTES, Passthrough
from proxy.transports.retry import Retrying, RetryPolicy
from proxy.transports.sse import MAX_EVENT_BYTES

__all__ = [
    "CHAT",
    "MESSAGES",
    "RESPONSES",
    "Completion",
    "EventStream",
    "Leg",
    "Outbound",
    "RetryPolicy",
    "StreamBroken",
    "Transient",
    "Transport",
    "Transports",
]


@dataclass(frozen=True, slots=True)
class Leg:
    """How one client wire reaches one route: the transport and the provider wire it carries."""

    transport: Transport
    wire: str


@dataclass(slots=True)
class Transports:
    """The transports of one app: ``direct`` speaks wires natively, ``translated`` speaks chat
    through litellm, ``anthropic`` speaks chat to Anthropic providers (litellm as its fallback)."""

    direct: Transport
    translated: Transport
    anthropic: Transport

    @classmethod
    def default(
        cls,
        upstreams: Iterable[Upstream],
        retry: RetryPolicy,
        on_retry: Callable[[str], None] | None = None,
        max_body: int = MAX_BODY_BYTES,
        max_event: int = MAX_EVENT_BYTES,
    ) -> Transports:
        """``max_body`` / ``max_event``: the bounds of what a provider may send back (a whole
        answer, one SSE event) on the passthrough (and the Anthropic translation over it) and
        through litellm."""
        needs_litellm = any(up.transport == "litellm" and not covers(up) for up in upstreams)
        passthrough = Passthrough(max_body=max_body, max_event=max_event)
        litellm = LiteLLM(needs_litellm, max_body=max_body, max_event=max_event)
        return cls(
            Retrying(passthrough, retry, on_retry),
            Retrying(litellm, retry, on_retry),
            Retrying(AnthropicChat(passthrough, litellm), retry, on_retry),
        )

    def leg(self, up: Upstream, client_wire: str) -> Leg:
        """The client's own wire when the provider speaks it; else chat, directly to an
        OpenAI-compatible provider, translated by routefit to an Anthropic one, or through
        litellm."""
        if client_wire in self.direct.speaks(up):
            return Leg(self.direct, client_wire)
        if up.transport == "openai" and CHAT in self.direct.speaks(up):
            return Leg(self.direct, CHAT)
        if covers(up):
            return Leg(self.anthropic, CHAT)
        return Leg(self.translated, CHAT)

    def start(self) -> None:
        self.direct.start()
        self.translated.start()
        self.anthropic.start()

    @property
    def ready(self) -> bool:
        return self.direct.ready and self.translated.ready and self.anthropic.ready

    async def aclose(self) -> None:
        await self.direct.aclose()
        await self.translated.aclose()
        await self.anthropic.aclose()
