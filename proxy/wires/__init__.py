"""Client wires: the incoming seam (see ``proxy.wires.base``), one stateless singleton per wire."""

from proxy.wires.anthropic import AnthropicWire
from proxy.wires.base import Answer, Outcome, RequestContext, Wire
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
    "RequestContext",
    "ResponsesWire",
    "Wire",
]

CHAT_WIRE = ChatWire()
ANTHROPIC_WIRE = AnthropicWire()
#: Stored responses are the shell's (``proxy.responses_store``), handed to the wire per request
#: in its ``RequestContext.stored``.
RESPONSES_WIRE = ResponsesWire()
