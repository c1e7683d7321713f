"""The client-wire seam: one module per API format a client speaks.

A wire turns a request body into the conversation pricing and fitting reason about
(``pricing.messages`` values that keep a reference to the wire objects they came from), writes the
fitted conversation back as a provider request (its own format when the route speaks it, chat
completions otherwise), reads the provider's answer back into the client's format, and owns the
client's error shape, SSE events and usage extraction. The gateway (``proxy.gateway``) runs the
same pipeline for every wire; adding a wire is one module here plus its routes in ``proxy.app``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from starlette.responses import Response

from pricing.messages import ChatRequest
from proxy.errors import ProxyError
from proxy.exchange import CHAT, MESSAGES, RESPONSES, Completion, EventStream, Outbound
from proxy.usage import Usage
from strategies.fit import Fit, FitError

__all__ = ["Answer", "Outcome", "Wire", "capped_output", "generated", "noting_relayed"]

#: A JSON string value after its key: its escaped contents (the unrolled form: no alternation
#: per character).
_STRING = rb'\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)"'
#: Where each client wire's stream events carry generated text: the *delta* fields only (a
#: Responses ``*.done`` event or ``response.completed`` repeats the whole text: never counted).
#: A quoted key cannot occur inside a JSON string (its quotes would be escaped there).
_GENERATED = {
    CHAT: re.compile(rb'"(?:content|reasoning_content|refusal|arguments)"' + _STRING),
    MESSAGES: re.compile(rb'"(?:text|partial_json|thinking)"' + _STRING),
    RESPONSES: re.compile(rb'"delta"' + _STRING),
}


def generated(chunk: bytes, wire: str) -> Iterator[bytes]:
    """The escaped contents of every generated-text value in one of ``wire``'s events."""
    pattern = _GENERATED.get(wire)
    if pattern is not None:
        for found in pattern.finditer(chunk):
            yield found.group(1)


@dataclass(slots=True)
class Outcome:
    """What a relayed stream told the gateway once it is over."""

    #: The provider's usage as far as it was reported (Anthropic states the prompt's count in
    #: ``message_start``; OpenAI's chat and Responses only at the end).
    usage: Usage | None = None
    #: The provider's own end-of-stream marker was seen (anything else is a broken stream).
    completed: bool = False
    #: The generated text relayed to the client so far, as escaped JSON string contents: what an
    #: unfinished stream is charged for beyond its prompt.
    relayed: bytearray = field(default_factory=bytearray)

    def relayed_text(self) -> str:
        """The generated text relayed so far (escapes never span two pieces, so the joined
        contents are one valid JSON string)."""
        if not self.relayed:
            return ""
        try:
            text = orjson.loads(b'"' + bytes(self.relayed) + b'"')
        except orjson.JSONDecodeError:  # not ours to judge: count the bytes as they came
            return self.relayed.decode("utf-8", "replace")
        return text if isinstance(text, str) else ""


async def noting_relayed(
    chunks: AsyncGenerator[bytes, None], outcome: Outcome, wire: str
) -> AsyncGenerator[bytes, None]:
    """``chunks`` as they are, the generated text in each noted in ``outcome`` before it goes
    out (what was generated is billed whether or not the client read it)."""
    pattern = _GENERATED.get(wire)
    try:
        async for chunk in chunks:
            if pattern is not None:
                for found in pattern.finditer(chunk):
                    outcome.relayed += found.group(1)
            yield chunk
    finally:
        await chunks.aclose()


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

    #: The provider wire name of this format (``proxy.exchange.CHAT`` ...).
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
