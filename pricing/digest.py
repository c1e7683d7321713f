"""The digests that key routefit's memos and anchors by what a prompt says.

A key is the 128-bit xxh3 digest of a value written as JSON. orjson writes plain prose at
memory speed, but escapes every quote, backslash and newline of a string one by one: a 350 KB
JSON tool output took 0.37 ms to write (prose of 470 KB, 0.013 ms), and one request keyed each
of its messages three or four times (the message memo once per fit pass, the anchors' prefix
keys): a 120k-token prompt of JSON went forward 1.1 ms sooner without it (9.45 against 8.37 ms),
and a session paid it again every later turn carrying that output in its history. A string
over ``DIGEST_ABOVE`` characters is digested on its own instead (its UTF-8, ~20 GB/s) and the
value keyed by that digest in its place.

What a key promises stays the same: two different values share one only by a collision of a
128-bit digest. The replacement is made so that it cannot be confused with anything the value
could hold itself (``text_key``: a one-element list where the field is always a string;
``long_digest``: the strings' positions kept apart from the value they were taken out of).
A value is keyed one way or the other by what it is (``Message.long``; the parse memo's look
where the wires put long texts; ``long_digest``'s count of parts), never by chance, so the same
prompt always has the same key. Keys written by a routefit before this
digested every string whole: an anchor kept from then misses once, as after any expiry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import xxhash

from pricing.utf8 import utf8

__all__ = ["DIGEST_ABOVE", "Path", "digest_apart", "long_digest", "text_key", "value_digest"]

#: Strings longer than this many characters are digested apart in a key (4 KB: a string this
#: short writes in a microsecond however it is escaped; the digest costs about that).
DIGEST_ABOVE = 4096

#: Marks a value keyed by ``long_digest``: no value of a message's wire form (a dict, or a
#: message's dict beside its images' details) is a list that starts with it.
_LONG = "\x00long"
#: Marks one keyed by ``digest_apart``.
_APART = "\x00apart"

#: Where a string is in a value: the keys and indexes that lead to it.
Path = tuple[str | int, ...]


def _text_digest(text: str) -> str:
    return xxhash.xxh3_128_hexdigest(utf8(text))


def text_key(text: str) -> str | list[str]:
    """``text`` as a key holds it: itself, or a one-element list of its digest when it is long
    (in a field that only ever holds strings, so the two never meet)."""
    return text if len(text) <= DIGEST_ABOVE else [_text_digest(text)]


def value_digest(value: Any, sort_keys: bool = False) -> bytes:
    """The digest of ``value``'s JSON (``sort_keys``: with its objects' keys in order, so two
    dicts that differ only in their keys' order are one key)."""
    option = orjson.OPT_SORT_KEYS if sort_keys else 0
    return xxhash.xxh3_128_digest(orjson.dumps(value, option=option))


def long_digest(value: Any, sort_keys: bool = False) -> bytes:
    """``value_digest`` of a value holding long strings: each digested apart (``text_key``'s
    rule), the value written with those strings emptied, and beside it where they were and
    what they digest to. Two values with equal keys then have the same shape, the same short
    strings and, at the same places, long strings of the same digest.

    A value of more than ``_WALKED`` parts is written whole instead (``value_digest``): a
    client may nest a large object beside a long text, and a walk in Python costs ten times
    what orjson's writing does per part. Decided by the value alone, so its key is too."""
    taken: list[tuple[int, str]] = []
    seen = [0]

    def walk(v: Any) -> Any:
        seen[0] += 1
        if seen[0] > _WALKED:
            raise _TooBig
        if isinstance(v, str):
            if len(v) <= DIGEST_ABOVE:
                return v
            taken.append((seen[0], _text_digest(v)))
            return ""
        if isinstance(v, dict):
            keys = sorted(v) if sort_keys else v
            return {k: walk(v[k]) for k in keys}
        if isinstance(v, list | tuple):
            return [walk(item) for item in v]
        return v

    try:
        emptied = walk(value)
    except _TooBig:
        return value_digest(value, sort_keys)
    return value_digest([_LONG, emptied, taken], sort_keys)


#: The most parts (values, objects and arrays) ``long_digest`` walks.
_WALKED = 256


class _TooBig(Exception):
    pass


def digest_apart(value: dict[str, Any], strings: Sequence[tuple[Path, str]]) -> bytes:
    """``value_digest`` of a dict with the long ``strings`` found at their paths digested apart:
    the value written with those strings emptied (copied along their paths only: the rest is
    written by orjson as it is, however a client nested it), and beside it where they were and
    what they digest to."""
    emptied: Any = dict(value)
    for path, _ in strings:
        node = emptied
        for step in path[:-1]:
            child = node[step]
            child = dict(child) if type(child) is dict else list(child)
            node[step] = child
            node = child
        node[path[-1]] = ""
    taken = [[list(path), _text_digest(text)] for path, text in strings]
    return value_digest([_APART, emptied, taken])
