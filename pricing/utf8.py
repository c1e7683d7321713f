"""A long text's UTF-8, encoded once however many readers need it.

A request's long text is read as UTF-8 by its bound, its content chunks, its count's cache key,
its digest and its sample's slices, and each encoded it again. For ASCII that is a copy; for a
text with anything else in it the encoder works character by character: a 129k-character CJK
text took 0.15 ms to encode, five times a request before it was forwarded. The last few long
texts encoded are kept here by identity — never by value, so one team's text is never found
by another team's equal one — up to ``_KEPT_BYTES`` in all, and a text is held only while it
is among them (a request's body lives about as long).
"""

from __future__ import annotations

import threading

__all__ = ["utf8"]

#: Texts at least this long (in characters) are kept once encoded; shorter ones encode in
#: about what a lookup costs.
_KEPT_FROM = 16 * 1024
#: What the kept encodings may hold in all (the oldest go first).
_KEPT_BYTES = 4 * 1024 * 1024

_kept: dict[int, tuple[str, bytes]] = {}
_held = 0
_lock = threading.Lock()


def utf8(text: str) -> bytes:
    """``text`` in UTF-8 (a lone surrogate as the three bytes a tokenizer replaces it by)."""
    global _held
    if text.isascii() or len(text) < _KEPT_FROM:
        return text.encode("utf-8", "surrogatepass")
    found = _kept.get(id(text))
    if found is not None and found[0] is text:
        return found[1]
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= _KEPT_BYTES:
        with _lock:
            if id(text) not in _kept:  # another thread may have kept it meanwhile
                _kept[id(text)] = (text, data)
                _held += len(data)
            while _held > _KEPT_BYTES:
                _held -= len(_kept.pop(next(iter(_kept)))[1])
    return data
