"""What the two seams exchange: a provider-wire request going out, the answer coming back.

A client wire (``proxy.wires``) writes the fitted conversation as an ``Outbound`` in a provider
wire and reads the provider's ``Completion`` or ``EventStream`` back; a transport
(``proxy.transports``) carries that ``Outbound`` to a provider and returns its answer. Both
import this package and never each other, so a wire can be read (and tested) without any HTTP
client, and a transport without any API format's rules. ``proxy.exchange.sse`` is the SSE
framing both read and write; ``proxy.exchange.anthropic_terms`` the Anthropic ↔ chat words the
Anthropic wire and the chat→Messages adapter share.

Failures before any byte of the answer are ``ProxyError`` (``Transient`` when another attempt
may succeed: ``proxy.transports.retry``); a stream that breaks after it started raises
``StreamBroken`` from its iterator, and the client's wire turns that into its own error event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.errors import ProxyError

__all__ = [
    "CHAT",
    "EMBEDDINGS",
    "GEMINI",
    "MESSAGES",
    "RESPONSES",
    "UNREADABLE",
    "WIRES",
    "Completion",
    "EventStream",
    "Outbound",
    "StreamBroken",
    "Transient",
    "as_completion",
    "as_stream",
    "unreadable",
]

#: Provider wires: OpenAI chat completions, Anthropic messages, OpenAI responses, Google's
#: generateContent (its model and method in the URL: ``proxy.providers.gemini_url``).
CHAT, MESSAGES, RESPONSES, GEMINI = "chat", "messages", "responses", "gemini"
WIRES = (CHAT, MESSAGES, RESPONSES, GEMINI)
#: An embeddings request (``proxy.embeddings``): a provider endpoint, not a chat wire.
EMBEDDINGS = "embeddings"


@dataclass(frozen=True, slots=True)
class Outbound:
    """One request in a provider wire, ready to send to a deployment."""

    wire: str
    body: Mapping[str, Any]
    #: Headers of the client's that the provider must see (e.g. ``anthropic-beta``).
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Whether the answer is asked for as a stream (``EventStream``) or whole (``Completion``).
    stream: bool = False
    #: Whether the transport may retry it (``upstream_retries``): not on a routed alias, whose
    #: router tries the next deployment itself (both at once made 9 calls of 3 attempts).
    retry: bool = True


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


#: What reading a provider's answer or event raises when its shape is not the one its wire
#: promises (a usage that is a number, a list where a message was due, an integer beyond 64
#: bits): nothing a provider says is taken on faith, so such an answer is malformed, like bad
#: JSON -- never routefit's internal error.
UNREADABLE = (TypeError, ValueError, AttributeError, KeyError, IndexError)


def unreadable(model: str) -> ProxyError:
    """The 502 of an answer that raised one of ``UNREADABLE`` (billed like a malformed one)."""
    err = ProxyError(
        502, f"upstream {model} returned a response routefit cannot read", code="upstream_malformed"
    )
    err.origin = "upstream"
    return err


class EventStream(Protocol):
    """Complete SSE events (each with its blank-line terminator) as the provider sends them."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None:
        """Stop reading and drop the provider's connection (idempotent)."""


def as_completion(answer: Completion | EventStream) -> Completion:
    """The whole answer a non-streamed ``Outbound`` was sent for."""
    if not isinstance(answer, Completion):
        raise TypeError("a transport answered a whole-answer request with a stream")
    return answer


def as_stream(answer: Completion | EventStream) -> EventStream:
    """The event stream a streamed ``Outbound`` was sent for."""
    if isinstance(answer, Completion):
        raise TypeError("a transport answered a stream request with a whole answer")
    return answer
