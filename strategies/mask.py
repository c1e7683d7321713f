"""Masking tool outputs: the call stays, its output becomes a short placeholder.

Tool outputs carry most of an agent session's tokens and age fastest: a file read forty rounds
ago has usually been superseded, while what the user asked and what the assistant said and
decided still steer the work. Masking old outputs while keeping every call and every word is the
one simple strategy with published evidence (observation masking, arXiv 2508.21433: it halved
cost and matched or beat LLM summaries on solve rate), so fitting masks before it elides.

The placeholder is a function of the tool's name and the output's price alone, so an output
masked on one turn renders the same bytes on every later turn and the provider's prefix cache
survives; which outputs are masked is decided by ``strategies.elide``'s cache-stable cut points.
A masked message keeps its role, ``tool_call_id`` and other wire fields, so every wire writes it
back as the same tool result with new content (as a capped one), and pairing stays valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pricing.messages import Message, TextPart
from strategies.actions import Label
from strategies.strategy import Move

__all__ = ["MASK", "MASK_PREFIX", "mask_output", "mask_placeholder", "tool_name", "tool_names"]

MASK_PREFIX = "[routefit: output of "


def mask_placeholder(name: str, tokens: int) -> str:
    """The text a masked output becomes: what was removed, and that the call is still there."""
    return f"{MASK_PREFIX}{name} ({tokens:,} tokens) masked to fit the context budget]"


def tool_names(unit: Sequence[Message]) -> dict[str, str]:
    """The name of each call of the unit by its id (the first call of an id; ``"tool"`` for a
    call without a name): built once per unit, as a unit of N calls has N outputs to name and a
    scan per output cost N² (``strategies.moves.Job.tool_names``)."""
    names: dict[str, str] = {}
    for message in unit:
        for call in message.tool_calls:
            names.setdefault(call.id, call.name or "tool")
    return names


def tool_name(unit: Sequence[Message], call_id: str | None) -> str:
    """The name of the call ``call_id`` answers, from the unit's calling message."""
    return tool_names(unit).get(call_id, "tool") if call_id is not None else "tool"


def mask_output(message: Message, name: str, tokens: int) -> Message:
    """``message`` (a tool result) with its whole content replaced by the placeholder."""
    text = mask_placeholder(name, tokens)
    wire = None
    if message.wire is not None:
        wire = {**message.wire, "content": text}
    return replace(message, parts=(TextPart(text),), wire=wire)


#: Old tool outputs become placeholders at the planner's mask points.
MASK = Move("mask", Label("masked", "messages", "masked", "tool output(s)"))
