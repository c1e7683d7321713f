"""The client-wire seam: one module per API format a client speaks.

A wire turns a request body into the conversation pricing and fitting reason about
(``pricing.messages`` values that keep a reference to the wire objects they came from), writes the
fitted conversation back as a provider request (its own format when the route speaks it, chat
completions otherwise), reads the provider's answer back into the client's format, and owns the
client's error shape, SSE events and usage extraction. The gateway (``proxy.gateway``) runs the
same pipeline for every wire; adding a wire is one module here plus its routes in ``proxy.app``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.responses import Response

from pricing.messages import ChatRequest
from proxy.errors import ProxyError
from proxy.transports import Completion, EventStream, Outbound
from proxy.usage import Usage
from strategies.fit import Fit, FitError

__all__ = ["Answer", "Outcome", "Wire", "capped_output"]


@dataclass(slots=True)
class Outcome:
    """What a relayed stream told the gateway once it is over."""

    usage: Usage | None = None
    #: The provider's own end-of-stream marker was seen (anything else is a broken stream).
    completed: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer in the client's wire, with the usage it reported."""

    body: bytes
    usage: Usage | None


def capped_output(body: Mapping[str, Any], fitted: Fit, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """``body`` with the output cap the fit settled (``FitReport.output``: clamped to the
    route's limit, or shrunk to the room beside the prompt) in each of ``keys`` it carries (the
    first when it carries none). The very same object when the client's cap stands, so an
    untouched passthrough body stays byte-stable."""
    output = fitted.report.output
    if output is None or not output.lowered:
        return body
    present = [k for k in keys if k in body] or [keys[0]]
    return {**body, **dict.fromkeys(present, output.sent)}


class Wire(Protocol):
    """One client API format."""

    #: The provider wire name of this format (``proxy.transports.CHAT`` ...).
    name: str

    def parse(self, body: Any) -> ChatRequest:
        """The conversation; ``pricing.messages.RequestError`` names a bad field."""

    def streams(self, request: ChatRequest) -> bool:
        """Whether the client asked for a stream."""

    def outbound(
        self, request: ChatRequest, fitted: Fit, wire: str, headers: Mapping[str, str]
    ) -> Outbound:
        """The fitted request in provider wire ``wire`` (this wire's, or chat by translation);
        ``headers`` are the client's, for the ones a provider must see."""

    def answer(self, request: ChatRequest, completion: Completion, wire: str) -> Answer:
        """A whole provider answer in provider wire ``wire`` as this wire's answer."""

    def relay(
        self, request: ChatRequest, events: EventStream, wire: str, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        """The provider's events as this wire's events; records usage and completion in
        ``outcome``; a broken or unfinished stream ends with this wire's error event."""

    def overflow(self, exc: FitError) -> ProxyError:
        """The refusal of a request that cannot be made to fit, as this wire's clients read it."""

    def error_response(self, err: ProxyError) -> Response:
        """An error in this wire's shape, with its status."""
