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
    """At most ``maxsize`` units of entries, the least recently used going first: an entry is
    one unit unless ``put`` weighs it (a memo of values whose memory varies, such as parsed
    messages, is bounded by their bytes). ``hits`` and ``misses`` are its owner's to count
    (what counts as a lookup is the owner's to say)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[bytes, V] = OrderedDict()
        #: The weight of each entry put with one other than 1, and the units held in all.
        self._weights: dict[bytes, int] = {}
        self._held = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> V | None:
        # No lock: an OrderedDict's read and its move to the end are each one step under the
        # GIL (byte keys run no Python to hash or compare); a key another thread evicted
        # meanwhile is simply not moved.
        found = self._data.get(key)
        if found is not None:
            try:  # noqa: SIM105 - every hit's path: a try costs nothing, a context manager does
                self._data.move_to_end(key)
            except KeyError:
                pass
        return found

    def put(self, key: bytes, value: V, weight: int = 1) -> None:
        with self._lock:
            if key in self._data:
                self._held -= self._weights.pop(key, 1)
            self._data[key] = value
            self._data.move_to_end(key)
            if weight != 1:
                self._weights[key] = weight
            self._held += weight
            while self._held > self.maxsize and self._data:
                old, _ = self._data.popitem(last=False)
                self._held -= self._weights.pop(old, 1)

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
            self._weights.clear()
            self._held = 0
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def held(self) -> int:
        """The units its entries weigh together (``len`` when none was weighed)."""
        return self._held
