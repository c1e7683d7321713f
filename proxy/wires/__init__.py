"""Client wires: the incoming seam (see ``proxy.wires.base``)."""

from proxy.wires.base import Answer, Outcome, Wire
from proxy.wires.chat import ChatWire
from proxy.wires.responses import ResponsesWire

__all__ = [
    "CHAT_WIRE",
    "RESPONSES_WIRE",
    "Answer",
    "ChatWire",
    "Outcome",
    "ResponsesWire",
    "Wire",
]

CHAT_WIRE = ChatWire()
#: Stateless (no storage): the dry run. ``POST /v1/responses`` makes one per request.
RESPONSES_WIRE = ResponsesWire()
