"""The transport seam: how routefit talks to a provider, whatever the client's wire.

A transport carries one *provider wire* request (``Outbound``: a path relative to the route's API
base, a JSON body, extra headers) and returns the provider's answer, either whole
(``Completion``) or as a stream of complete SSE events (``EventStream``). It knows nothing of
pricing, fitting, budgets or the client's wire: those belong to ``proxy.gateway`` and
``proxy.wires``. Like httpx's ``BaseTransport``, it is the one thing a test replaces to run the
gateway in-process (``proxy.transports.mock``).

Failures before any byte of the answer are ``ProxyError`` (``Transient`` when another attempt
may succeed, for ``proxy.transports.retry``); a stream that breaks after it started raises
``StreamBroken`` from its iterator, and the client's wire turns that into its own error event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.config import Upstream
from proxy.errors import ProxyError

__all__ = [
    "Completion",
    "EventStream",
    "Outbound",
    "StreamBroken",
    "Transient",
    "Transport",
]

#: Provider wires: OpenAI chat completions, Anthropic messages, OpenAI responses.
CHAT, MESSAGES, RESPONSES = "chat", "messages", "responses"


@dataclass(frozen=True, slots=True)
class Outbound:
    """One request in a provider wire, ready to send on a route."""

    wire: str
    body: Mapping[str, Any]
    #: Headers of the client's that the provider must see (e.g. ``anthropic-beta``).
    headers: Mapping[str, str] = field(default_factory=dict)
    stream: bool = False


@dataclass(slots=True)
class Completion:
    """A whole answer: the provider's bytes as they came, and the same parsed once."""

    body: bytes
    data: Any
    headers: dict[str, str] = field(default_factory=dict)


class Transient(ProxyError):
    """A failure before any byte reached the client that another attempt may not meet."""

    def __init__(self, *args: Any, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after


class StreamBroken(Exception):
    """The provider's stream broke off after it started (never retried: bytes went out)."""


class EventStream(Protocol):
    """Complete SSE events (each with its blank-line terminator) as the provider sends them."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None:
        """Stop reading and drop the provider's connection (idempotent)."""


class Transport(Protocol):
    """What the gateway needs from a way of reaching providers."""

    def speaks(self, up: Upstream) -> frozenset[str]:
        """The provider wires this transport can carry to ``up`` without translation."""

    async def complete(self, up: Upstream, out: Outbound) -> Completion: ...

    async def stream(self, up: Upstream, out: Outbound) -> EventStream: ...

    def start(self) -> None:
        """Begin any slow preparation in the background (called from the app's lifespan)."""

    @property
    def ready(self) -> bool: ...

    async def aclose(self) -> None: ...
