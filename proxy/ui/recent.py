"""The request log's records as the dashboard last read them: a copy of the store's per-team
lists, brought up to date by reading only what is new.

The page polls every 3 s, and its spend, per-key and log panels need every kept record (the
newest ``request_log.keep`` per team). Decoding all of them on every poll costs ~40 µs a record —
0.4 s per poll for ten teams at the default 1,000 — on the event loop that serves requests. So
each team's list is read once, then each poll reads its newest few records until it meets the
newest one it already has (more, four times as many at a time, when more came in), and decodes
only those. A list that no longer holds that record (the store was emptied, or more arrived
than it keeps between two polls) is read and decoded whole again, in a thread. The copy never
holds more than the store does: ``keep`` per team, the oldest dropped as new ones come.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Sequence

import orjson

from proxy.records import RequestRecord
from proxy.store import Store

__all__ = ["RecentRecords"]

#: Records read per team on a poll before looking further back.
STEP = 32
#: A read this long is decoded in a thread, off the event loop.
THREAD_AT = 256


def _decode(raw: Sequence[bytes]) -> list[RequestRecord]:
    out = []
    for data in raw:
        try:
            out.append(RequestRecord.from_dict(orjson.loads(data)))
        except (ValueError, KeyError, TypeError):
            continue  # a record this version cannot read
    return out


def _newest_id(data: bytes) -> str | None:
    """A stored record's id, read without building the record."""
    try:
        found = orjson.loads(data).get("id")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


class RecentRecords:
    """Per team, its kept records, newest first; ``refresh`` before reading."""

    def __init__(self, store: Store, keep: int) -> None:
        self.store = store
        self.keep = keep
        self.teams: dict[str, deque[RequestRecord]] = {}
        self._lock = asyncio.Lock()

    async def refresh(self, teams: Iterable[str]) -> None:
        """Bring each team's copy up to the store's list (raises ``StoreUnavailable``)."""
        async with self._lock:  # the data and the log endpoints may poll at once
            for team in teams:
                await self._refresh(team)

    async def _refresh(self, team: str) -> None:
        have = self.teams.get(team)
        known = have[0].id if have else None
        depth = min(STEP, self.keep) if known is not None else self.keep
        while True:
            raw = await self.store.recent_requests(team, depth)
            ids = [_newest_id(d) for d in raw] if known is not None else []
            if known in ids:
                new = await self._decoded(raw[: ids.index(known)])
                assert have is not None
                have.extendleft(reversed(new))
                return
            if len(raw) < depth or depth >= self.keep:
                break  # the whole list is read: the known record is gone from it
            depth = min(self.keep, depth * 4)
        self.teams[team] = deque(await self._decoded(raw), maxlen=self.keep)

    async def _decoded(self, raw: Sequence[bytes]) -> list[RequestRecord]:
        if len(raw) >= THREAD_AT:
            return await asyncio.to_thread(_decode, raw)
        return _decode(raw)

    def records(self, teams: Iterable[str]) -> list[RequestRecord]:
        """The copies of ``teams``' lists, merged, newest first."""
        found = [r for team in teams for r in self.teams.get(team, ())]
        found.sort(key=lambda r: r.time, reverse=True)
        return found
