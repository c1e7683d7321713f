"""Provider transports: the outgoing seam (see ``proxy.transports.base``).

``Transports`` is the set one app uses, chosen once from the config: the passthrough for
providers that speak a wire natively, litellm for translation, both wrapped in bounded retries.
``route_plan`` answers, once per (route, client wire), which transport carries the request and
in which provider wire.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from proxy.config import Upstream
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
from proxy.transports.passthrough import Passthrough
from proxy.transports.retry import Retrying, RetryPolicy

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
    """The transports of one app: ``direct`` speaks wires natively, ``translated`` speaks chat."""

    direct: Transport
    translated: Transport

    @classmethod
    def default(
        cls,
        upstreams: Iterable[Upstream],
        retry: RetryPolicy,
        on_retry: Callable[[str], None] | None = None,
    ) -> Transports:
        needs_litellm = any(up.transport == "litellm" for up in upstreams)
        return cls(
            Retrying(Passthrough(), retry, on_retry),
            Retrying(LiteLLM(needs_litellm), retry, on_retry),
        )

    def leg(self, up: Upstream, client_wire: str) -> Leg:
        """The client's own wire when the provider speaks it; else chat, directly to an
        OpenAI-compatible provider or through litellm."""
        if client_wire in self.direct.speaks(up):
            return Leg(self.direct, client_wire)
        if up.transport == "openai" and CHAT in self.direct.speaks(up):
            return Leg(self.direct, CHAT)
        return Leg(self.translated, CHAT)

    def start(self) -> None:
        self.direct.start()
        self.translated.start()

    @property
    def ready(self) -> bool:
        return self.direct.ready and self.translated.ready

    async def aclose(self) -> None:
        await self.direct.aclose()
        await self.translated.aclose()
