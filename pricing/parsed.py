"""Messages parsed once per tenant: an agent sends its whole session again every turn.

A wire's parse turns each message of the body into ``Message`` values (validating it, reading
its parts and calls): ~3.3 µs a chat message, 1.3 ms of a 400-message session's turn, every
turn, for messages it parsed the turn before. ``once`` wraps a wire's per-message parse with a
memo keyed by the message's own JSON (``orjson.dumps`` of the decoded dict and its 128-bit
digest, ~0.5 µs for a tool output of a kilobyte): an unchanged message comes back as the very
values parsed the first time, and the fit's per-object memos then find them by identity too.

What a hit hands back is what the parse would have made of that JSON: the parse is a function
of the message alone (its position only names a field in an error, and an error is never
kept), so equal JSON is an equal result. The result keeps the dict it was parsed from
(``Message.wire``): the earlier request's, equal to this one's — never mutated, like every
wire dict. Kept apart:

* per tenant (``scope``, the team): a hit is faster than a parse, and no team may time a
  request to learn what another sent (docs/security.md, "Isolation of prompt-derived facts");
* per wire (``kind``): the same JSON means different messages on different wires;
* within a request, a value is handed out once: two equal messages in one body (two ``"OK"``
  tool outputs of one call id) are two objects, as parsing them made them — the fit and the
  Messages wire find a message's place by its identity.

Bounded by what it holds: ``PARSED`` weighs each entry by its JSON's length and a fixed
overhead, 32 MiB in all (none at idle); a message over ``LARGEST`` bytes is parsed every time
(its digest would cost more than its parse, which is one part, however long), and so is one
JSON cannot write again (a lone surrogate).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson
import xxhash

from pricing.lru import LRU

__all__ = ["LARGEST", "PARSED", "once"]

T = TypeVar("T")

#: Messages whose JSON is over this many bytes are not kept (parsing one costs the same
#: whatever its length; digesting it does not).
LARGEST = 64 * 1024
#: What a kept entry weighs beyond its JSON: its key, its values' objects, the dict's own (a
#: memo filled with 14k agent-sized messages grew a process by 36 MiB against 32 held).
_OVERHEAD = 1024
#: The process's memo of parsed messages, in bytes held (every wire and tenant; keys say whose).
PARSED: LRU[Any] = LRU(32 * 1024 * 1024)


def once(parse: Callable[[Any, int], T], kind: bytes, scope: bytes) -> Callable[[Any, int], T]:
    """``parse`` (a wire's parse of message ``index`` of a body) for one request of tenant
    ``scope``, through ``PARSED`` under ``kind`` (one byte per wire)."""
    suffix = kind + scope
    handed: set[int] = set()

    def parsed(raw: Any, index: int) -> T:
        if type(raw) is not dict:
            return parse(raw, index)
        content = raw.get("content")
        if type(content) is str and len(content) > LARGEST:
            return parse(raw, index)
        try:
            data = orjson.dumps(raw)
        except TypeError:  # not JSON again (a lone surrogate): parsed, not kept
            return parse(raw, index)
        if len(data) > LARGEST:
            return parse(raw, index)
        key = xxhash.xxh3_128_digest(data) + suffix
        found = PARSED.get(key)
        if found is None or id(found) in handed:
            found = parse(raw, index)
            PARSED.put(key, found, len(data) + _OVERHEAD)
        handed.add(id(found))
        return found

    return parsed
