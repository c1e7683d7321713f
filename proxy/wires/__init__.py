"""Client wires: the incoming seam (see ``proxy.wires.base``)."""

from proxy.wires.base import Answer, Outcome, Wire
from proxy.wires.chat import ChatWire

__all__ = ["CHAT_WIRE", "Answer", "ChatWire", "Outcome", "Wire"]

CHAT_WIRE = ChatWire()
