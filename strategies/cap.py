"""Capping oversized messages (tool outputs first) to the policy's message cap.

A capped form is a function of the message, the cap and the route alone, so a message capped on
one turn is capped to the same bytes on every later turn: capping never moves the cache prefix
after the turn that first needs it. All oversized messages are capped together, for the same
reason (capping "only as many as needed" would flip old messages between forms turn by turn).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pricing.capped import Capped, CapTooSmall, cap_message
from pricing.messages import Message
from pricing.meter import MessagePressure
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from strategies.actions import Action, Label
from strategies.offload import placeholder_for
from strategies.strategy import FitContext, FitState, Knobs, Rewrite

__all__ = ["CAP", "CapResult", "cap_limit", "cap_oversized"]


@dataclass(frozen=True, slots=True)
class CapResult:
    messages: tuple[Message, ...]
    capped: int
    removed_tokens: int


def cap_limit(policy: Knobs, budget: int) -> int:
    if policy.message_cap_tokens is not None:
        return policy.message_cap_tokens
    return max(1, math.floor(policy.cap_fraction * budget))


def cap_oversized(
    messages: Sequence[Message],
    prices: Sequence[MessagePressure],
    route: Route,
    policy: Knobs,
    budget: int,
) -> CapResult:
    """Cap every message of a cappable role whose text + framing (with room for its images'
    placeholders: ``_offload_room``) exceeds the cap."""
    limit = cap_limit(policy, budget)
    out = list(messages)
    capped = removed = 0
    for i, (message, price) in enumerate(zip(messages, prices, strict=True)):
        if message.role not in policy.cap_roles:
            continue
        room = _offload_room(message, route)
        if price.text + price.framing + room <= limit:
            continue
        result = _capped(message, limit, room, route)
        if result is None:
            continue
        out[i] = result.message
        capped += 1
        removed += result.removed_tokens
    return CapResult(tuple(out), capped, removed)


def _offload_room(message: Message, route: Route) -> int:
    """The tokens of the placeholder texts the message's images may become when offloaded for
    room (only a route that sees pictures offloads them so; elsewhere they are text already).
    The cap keeps this room free, so a capped message renders within its cap whether or not its
    images are offloaded later (a capped tool result whose screenshot was then offloaded went
    over its cap by the placeholder). A function of the message and the route alone, like the
    capped form itself."""
    if not (message.images and route.supports_vision and route.image_rule.visual):
        return 0
    tok = get_tokenizer(route.tokenizer, route.scope)
    return sum(tok.count(placeholder_for(part, route)) for part in message.images)


def _capped(message: Message, limit: int, room: int, route: Route) -> Capped | None:
    """The message capped with ``room`` kept free, else (a cap too small for that) at the cap
    itself, as before the room was kept; None when neither cap can be met."""
    for cap in dict.fromkeys((limit - room, limit)):
        try:
            return cap_message(message, cap, route)
        except CapTooSmall:
            continue
    return None


LABEL = Label("capped", "messages", "capped", "message(s)")


def _cap(state: FitState, context: FitContext) -> tuple[tuple[Message, ...], Action]:
    prices = state.pressure.messages
    result = cap_oversized(state.messages, prices, context.route, context.policy, context.budget)
    return result.messages, Action(LABEL, result.capped, result.removed_tokens)


#: Capping runs once, when the policy reaches it: every later strategy sees the capped messages.
CAP = Rewrite("cap", LABEL, _cap)
