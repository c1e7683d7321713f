"""Atomic units of a conversation and the messages fitting must keep.

A provider rejects a tool result whose call is gone and an assistant tool call whose results are
gone, so an assistant message with ``tool_calls`` and the tool messages that follow it form one
unit: fitting removes units, never single messages. Every other message is a unit of its own.

Protected, never removed: system and developer messages, the first user message (the task), the
last user message, and the newest unit (what the model must answer now) with, when the
conversation's tail answers a tool round (``answered_round``), that round. That protection is a
preference, not the irreducible core: a round that does not fit is masked, capped and elided
before the request is refused (``strategies.moves._last_resort``); what no cut may touch is the
system prompt and the latest user message. Agent loops run many tool
calls after one user message; the units between that message and the newest unit (the rest of
the newest turn) are not protected here, but the planner keeps them whole whenever the turn
fits once its outputs are masked (``strategies.elide``: elision stops at the turn, the head
gives way to it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pricing.messages import Message

__all__ = [
    "Unit",
    "answered_round",
    "answered_rounds",
    "group_units",
    "protected_units",
]

_TOOL_ROLES = ("tool", "function")
#: Roles of the messages a conversation's tail is made of (``answered_rounds``).
_TAIL_ROLES = ("user", "system", "developer")


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages ``[start, end)`` of the conversation."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


def group_units(messages: Sequence[Message]) -> tuple[Unit, ...]:
    """Split a conversation into units.

    A tool message joins the unit before it when that unit is a tool-calling one (so an orphan
    that arrived orphaned is never separated further from where it stood); otherwise it is a
    unit of its own, as is every other message. A final assistant message without tool calls (a
    prefill) joins the unit before it: the newest unit is then what the model answers, and the
    tool round that answers is kept with it (``protected_units``), as without the prefill.
    """
    units: list[Unit] = []
    start = 0
    calling = False
    for i, message in enumerate(messages):
        if i == 0:
            calling = bool(message.tool_calls)
            continue
        if message.role in _TOOL_ROLES and calling:
            continue
        units.append(Unit(start, i))
        start = i
        calling = bool(message.tool_calls)
    if messages:
        last = messages[-1]
        prefill = last.role == "assistant" and not last.tool_calls
        if units and prefill and start == len(messages) - 1:
            start = units.pop().start
        units.append(Unit(start, len(messages)))
    return tuple(units)


def protected_units(messages: Sequence[Message], units: Sequence[Unit]) -> frozenset[int]:
    """Indices of the units fitting must keep intact."""
    if not units:
        return frozenset()
    keep = {len(units) - 1}
    first_user = last_user = None
    for u, unit in enumerate(units):
        for message in messages[unit.start : unit.end]:
            if message.role in ("system", "developer"):
                keep.add(u)
            elif message.role == "user":
                if first_user is None:
                    first_user = u
                last_user = u
    keep.update(u for u in (first_user, last_user) if u is not None)
    answered = answered_round(messages, units)
    if answered is not None:
        keep.add(answered)
    return frozenset(keep)


def answered_round(messages: Sequence[Message], units: Sequence[Unit]) -> int | None:
    """The unit of the tool round the conversation's tail answers, None when it answers none
    (``answered_rounds``)."""
    return answered_rounds(messages, units)[-1] if units else None


def answered_rounds(messages: Sequence[Message], units: Sequence[Unit]) -> list[int | None]:
    """For each unit ``u``, the tool round the tail of the conversation cut after ``u`` answers.

    The tail is the run of units that ends the conversation made only of user, system and
    developer messages (with a final prefill, which ``group_units`` put in the last unit): the
    latest user message, a ``system`` / ``developer`` note after it or before it (chat and
    Responses take them anywhere; Claude Code sends ``role: system`` entries inside Messages'
    ``messages``), several user messages in a row. When the unit before it is a tool round,
    the tail answers that round: its results are what the user (or an Anthropic client, whose
    one user turn carries tool results and text) reacts to, part of what the model must answer
    now, so they are kept as the newest turn is — whatever the tail, as they are when it is
    the user message alone. The tail's notes are protected as every note is, its latest user
    message as the latest is; its other user messages are not (they are people's words, but
    not what must go: one may be a recording the budget cannot hold), and go after the round
    only when the plans must cut into the newest turn. One pass: linear in the units."""
    last = len(messages) - 1
    out: list[int | None] = []
    start = 0  # the first unit of the tail ending at ``u``
    for u, unit in enumerate(units):
        tail = all(
            m.role in _TAIL_ROLES or (i == last and m.role == "assistant" and not m.tool_calls)
            for i, m in enumerate(messages[unit.start : unit.end], unit.start)
        )
        if not tail:
            out.append(None)
            start = u + 1
            continue
        before = start - 1
        out.append(before if before >= 0 and messages[units[before].start].tool_calls else None)
    return out
