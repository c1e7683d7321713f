"""Content-defined chunks of a long text, so that a count can be memoised a chunk at a time.

A message's count is memoised whole (``pricing.tokenizers.CountCache``), which serves an agent's
history but not a text that is mostly old: a file read again after an edit, a system prompt
whose last lines (a date, a directory listing) change, a long document behind a per-request
header. Its digest is new, so the whole text was counted again (7-10 ms for 30k tokens here).

Cut where the content says, not at fixed offsets, the same stretch of text is cut alike wherever
it sits: a text with something new at its start, in its middle or at its end shares every chunk
but those next to the change with the text it was, and only those are counted. Fixed-size pieces
(``split_for_count``) would all shift with the first inserted character.

The cuts are FastCDC's (FastCDC 2020, the ``pyfastcdc`` package's compiled one, ~0.7 ns a
byte: a rolling gear hash over the UTF-8 bytes, a cut where the hash of the last few dozen bytes
matches a mask; chunks of ``AVERAGE`` bytes on average, at most eight times that). Its least
chunk is the least it allows (64 bytes): it looks for the next cut from there, so a larger least
ties each cut more to the one before, and a change costs more chunks (measured with 4 KB chunks:
after a 700-byte new head, up to 5 of ~21 chunks differed with a least of 1 KB, at most 2 with
64 bytes). Each cut is moved forward to the next point where counts add up (``split_for_count``'s
rule: before an ASCII space that follows printable ASCII), looked for within ``SNAP`` bytes so
that text without such points (CJK without spaces, base64) costs nothing to look through: there
it is one chunk, counted whole as before. Where the compiled chunker is not installed (a platform
without its wheel: the pure Python one would cost more than the count) every text is one chunk.
"""

from __future__ import annotations

import itertools
import re
from functools import cache
from typing import TYPE_CHECKING, cast

from pricing.utf8 import utf8

if TYPE_CHECKING:
    from pyfastcdc import FastCDC

__all__ = ["AVERAGE", "content_chunks"]

#: Bytes in a chunk on average. Each chunk is a cache entry, a lookup and a call of the
#: tokenizer: at 4 KB, a 480 KB prompt of new text (120 calls) took 1-3 ms more to count than in
#: two halves; at 16 KB (30 calls) the same as the halves. A change costs a recount of a chunk
#: or two (~4-8k tokens, ~1 ms).
AVERAGE = 16384
#: How far past a content cut to look for a point where counts add up.
SNAP = 256
_CUT = re.compile(rb"[!-~] ")


@cache
def _compiled() -> type[FastCDC] | None:
    """The compiled FastCDC, None where it is not installed (imported at the first long text: a
    worker that never sees one never loads it)."""
    try:
        from pyfastcdc.cy import FastCDC as compiled
    except ImportError:
        return None
    return cast("type[FastCDC]", compiled)  # the package's stubs type its public name


def content_chunks(text: str, average: int = AVERAGE) -> list[str]:
    """``text`` in chunks that join back into it, cut where counts add up and where the content
    (not the offset) says; one chunk when there is no such point."""
    chunker = _compiled()
    if chunker is None:
        return [text]
    data = utf8(text)
    cuts: list[int] = []
    # an instance a call: one is not to be shared by threads
    for chunk in chunker(average, min_size=64, max_size=average * 8).cut_buf(data):
        end = chunk.offset + chunk.length
        found = _CUT.search(data, end, end + SNAP)
        if found is not None and found.start() + 1 < len(data):
            cut = found.start() + 1
            if not cuts or cut > cuts[-1]:
                cuts.append(cut)
    if not cuts:
        return [text]
    bounds = [0, *cuts, len(data)]
    if len(data) == len(text):  # ASCII: byte offsets are character offsets
        return [text[a:b] for a, b in itertools.pairwise(bounds)]
    return [data[a:b].decode("utf-8", "surrogatepass") for a, b in itertools.pairwise(bounds)]
