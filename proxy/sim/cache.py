"""Prompt caching as providers report it.

``PrefixCache`` (OpenAI, DeepSeek): automatic. A request's cached tokens are the longest token
prefix it shares with any earlier request to the same model, in whole blocks (128 tokens for
OpenAI, 64 for DeepSeek), and 0 unless that reaches the model's minimum (1024 / 64). The last
token of a prompt is never served from cache. Implemented as a hash chain over blocks
(``h_k = H(h_{k-1} ‖ block_k)``) in a bounded LRU set: memory is one digest per block.

``BreakpointCache`` (Anthropic): explicit. Only prefixes ending at a ``cache_control`` breakpoint
are written. A breakpoint reads the longest prefix written earlier that ends at its own block or
at one of the ``LOOKBACK`` content blocks before it (Anthropic's documented lookback: "the system
automatically checks for cache hits at all previous content block boundaries (up to
approximately 20 blocks before your explicit breakpoint)",
https://platform.claude.com/docs/en/build-with-claude/prompt-caching). So a client that marks
only its last block reads what the previous request wrote there while the new round adds at
most 20 blocks, and misses it beyond.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

from proxy.sim.tokens import as_ids

__all__ = ["LOOKBACK", "BreakpointCache", "PrefixCache"]

#: Content blocks before a breakpoint at whose ends it looks for an earlier write.
LOOKBACK = 20


class _LRUSet:
    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[bytes, None] = OrderedDict()

    def __contains__(self, key: bytes) -> bool:
        if key in self._data:
            self._data.move_to_end(key)
            return True
        return False

    def add(self, key: bytes) -> None:
        self._data[key] = None
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()


class PrefixCache:
    def __init__(self, block: int = 128, minimum: int = 1024, maxsize: int = 200_000) -> None:
        self.block = block
        self.minimum = minimum
        self._seen = _LRUSet(maxsize)
        self._lock = threading.Lock()

    def _chain(self, tokens: Sequence[int]) -> list[bytes]:
        usable = len(tokens) - 1  # the last token is always computed
        out: list[bytes] = []
        h = b""
        for start in range(0, usable - self.block + 1, self.block):
            h = hashlib.blake2b(
                h + as_ids(tokens[start : start + self.block]), digest_size=16
            ).digest()
            out.append(h)
        return out

    def lookup_and_store(self, tokens: Sequence[int]) -> int:
        """Cached tokens for this prompt; then remember the prompt for later requests."""
        chain = self._chain(tokens)
        with self._lock:
            hits = 0
            for h in chain:
                if h not in self._seen:
                    break
                hits += 1
            if len(tokens) >= self.minimum:
                for h in chain:
                    self._seen.add(h)
        cached = hits * self.block
        return cached if cached >= self.minimum else 0

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()

    def __len__(self) -> int:
        return len(self._seen)


class BreakpointCache:
    def __init__(self, minimum: int = 1024, maxsize: int = 100_000) -> None:
        self.minimum = minimum
        self._seen = _LRUSet(maxsize)
        self._lock = threading.Lock()

    def lookup_and_store(
        self, tokens: Sequence[int], breakpoints: Sequence[int], block_ends: Sequence[int] = ()
    ) -> tuple[int, int]:
        """(cache_read, cache_creation) tokens for a prompt with breakpoints at these positions
        and content blocks ending at ``block_ends`` (each breakpoint is one of them; without
        them, a breakpoint reads only at itself).

        Read: the longest prefix written by an earlier request that ends at a breakpoint or at
        one of the ``LOOKBACK`` block ends before it. Creation: from there to the last
        breakpoint (when that prefix is at least the minimum cacheable length). Everything after
        the last breakpoint is plain input.
        """
        points = sorted({p for p in breakpoints if p >= self.minimum})
        if not points:
            return 0, 0
        ends = sorted({e for e in block_ends if e <= points[-1]} | set(points))
        digests = {}
        h = hashlib.blake2b(digest_size=16)
        start = 0
        for e in ends:
            h.update(as_ids(tokens[start:e]))
            start = e
            digests[e] = h.copy().digest()
        where = {e: i for i, e in enumerate(ends)}
        looked = {e for p in points for e in ends[max(0, where[p] - LOOKBACK) : where[p] + 1]}
        with self._lock:
            read = max(
                (e for e in looked if e >= self.minimum and digests[e] in self._seen), default=0
            )
            for p in points:
                self._seen.add(digests[p])
        return read, points[-1] - read

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()
