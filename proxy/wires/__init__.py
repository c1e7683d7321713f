"""Client wires: the incoming seam (see ``proxy.wires.base``), one singleton per stateless wire."""

from proxy.wires.anthropic import AnthropicWire
from proxy.wires.base import Answer, Outcome, Wire
from proxy.wires.chat import ChatWire
from proxy.wires.responses import ResponsesWire

__all__ = [
    "ANTHROPIC_WIRE",
    "CHAT_WIRE",
    "RESPONSES_WIRE",
    "Answer",
    "AnthropicWire",
    "ChatWire",
    "Outcome",
    "ResponsesWire",
    "Wire",
]

CHAT_WIRE = ChatWire()
ANTHROPIC_WIRE = AnthropicWire()
#: Stateless (no storage). ``POST /v1/responses`` makes one per request, with the request's
#: ``responses_store.Keeper`` (``proxy.responses_api``).
RESPONSES_WIRE = ResponsesWire()
