"""Client wires: the incoming seam (see ``proxy.wires.base``), one stateless singleton per wire."""

from proxy.wires.anthropic import AnthropicWire
from proxy.wires.base import Answer, Outcome, RequestContext, Wire
from proxy.wires.chat import ChatWire
from proxy.wires.gemini import GeminiWire
from proxy.wires.responses import ResponsesWire

__all__ = [
    "ANTHROPIC_WIRE",
    "CHAT_WIRE",
    "GEMINI_WIRE",
    "RESPONSES_WIRE",
    "Answer",
    "AnthropicWire",
    "ChatWire",
    "GeminiWire",
    "Outcome",
    "RequestContext",
    "ResponsesWire",
    "Wire",
]

CHAT_WIRE = ChatWire()
ANTHROPIC_WIRE = AnthropicWire()
#: Gemini's generateContent: every route reached by translation to chat (``proxy.wires.gemini``).
GEMINI_WIRE = GeminiWire()
#: Stored responses are the shell's (``proxy.responses_store``), handed to the wire per request
#: in its ``RequestContext.stored``.
RESPONSES_WIRE = ResponsesWire()
