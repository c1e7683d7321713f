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
JSON cannot write again (a lone surrogate). A message whose long texts are where the wires put
them (a tool output, a text block: ``_long_texts``) is keyed with those digested apart
(``pricing.digest.digest_apart``) and weighed by them: written out, a 20 KB JSON tool output's
quotes and newlines were escaped one by one every turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import orjson
import xxhash

from pricing.digest import DIGEST_ABOVE, Path, digest_apart
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
        long: Sequence[tuple[Path, str]]
        if type(content) is str:
            long = ((_CONTENT, content),) if len(content) > DIGEST_ABOVE else ()
        else:
            long = _long_texts(content) if content else ()
        if long:  # its long texts digested apart, not written out again (``pricing.digest``)
            size = sum(len(text) for _, text in long)
            if size > LARGEST:
                return parse(raw, index)
            key = digest_apart(raw, long)
        else:
            try:
                data = orjson.dumps(raw)
            except TypeError:  # not JSON again (a lone surrogate): parsed, not kept
                return parse(raw, index)
            if len(data) > LARGEST:
                return parse(raw, index)
            key, size = xxhash.xxh3_128_digest(data), len(data)
        key += suffix
        found = PARSED.get(key)
        if found is None or id(found) in handed:
            found = parse(raw, index)
            PARSED.put(key, found, size + _OVERHEAD)
        handed.add(id(found))
        return found

    return parsed


def _long_texts(content: Any) -> Sequence[tuple[Path, str]]:
    """Where a message's list of content blocks holds texts over ``DIGEST_ABOVE``, and what they
    are, in the places the chat and Messages wires put them — a block's text, a tool result's
    content or its blocks' texts (a content that is a string is looked at by the caller): a few
    lookups a message (never a walk of what a client may nest), where writing out a 20 KB JSON
    tool output cost 25 µs every turn."""
    if type(content) is not list or len(content) > _BLOCKS:
        return ()
    found: list[tuple[Path, str]] = []
    for i, block in enumerate(content):
        if type(block) is not dict:
            continue
        for field in ("text", "content"):
            value = block.get(field)
            if type(value) is str and len(value) > DIGEST_ABOVE:
                found.append((("content", i, field), value))
            elif type(value) is list and len(value) <= _BLOCKS:
                for j, inner in enumerate(value):
                    text = inner.get("text") if type(inner) is dict else None
                    if type(text) is str and len(text) > DIGEST_ABOVE:
                        found.append((("content", i, field, j, "text"), text))
    return found


#: Content of more blocks than this is not looked into for long texts (written out instead).
_BLOCKS = 8
_CONTENT: Path = ("content",)
