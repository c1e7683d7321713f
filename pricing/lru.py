"""A bounded, thread-safe least-recently-used map from byte keys: the memos of prompt-derived
facts that are not token counts (``pricing.probe``'s image probes, ``pricing.meter``'s message
pressures) are each one, and their keys say whose facts they are (docs/security.md)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["LRU"]

V = TypeVar("V")


class LRU(Generic[V]):
    """At most ``maxsize`` entries, the least recently used going first. ``hits`` and
    ``misses`` are its owner's to count (what counts as a lookup is the owner's to say)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[bytes, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> V | None:
        found = self._data.get(key)  # a dict read is atomic under the GIL: a miss takes no lock
        if found is not None:
            with self._lock:
                if key in self._data:  # evicted by another thread meanwhile
                    self._data.move_to_end(key)
        return found

    def put(self, key: bytes, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def memo(self, key: bytes, make: Callable[[], V]) -> V:
        """The value under ``key``, made (and kept) on a miss; the lookup counted."""
        found = self.get(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        found = make()
        self.put(key, found)
        return found

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)
