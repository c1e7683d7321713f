"""The request log's store writes, in batches.

One store write per request cost more server CPU than anything else the request log does: a hop
to the embedded store's thread (and the GIL handed back and forth) and a transaction, or a Redis
round trip, for some 400 bytes. ``Batches`` collects the records and writes them together: as
soon as ``size`` are waiting, or ``delay`` seconds after the first of a batch arrived, whichever
comes first — one write at a time, so every team's records reach the store in the order they
were taken.

Never in a response's way: ``put`` only appends (it neither awaits nor blocks), and the queue is
bounded (``limit``): past it a record is dropped, counted and logged once per overflow, like a
store outage's. ``flush`` writes everything waiting; the lifespan's end calls it (through
``proxy.records.Records.close``) before the store closes, so a clean shutdown loses nothing, and
the request log's reader calls it first, so a process reads its own records at once. Another
replica sees a record up to ``delay`` seconds later than before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

__all__ = ["Batches", "Item"]

log = logging.getLogger("routefit")

#: (team, the record's bytes), as ``Store.record_requests`` takes them.
Item = tuple[str, bytes]
Write = Callable[[Sequence[Item]], Awaitable[None]]


class Batches:
    """Records in, batched store writes out (see the module doc)."""

    def __init__(
        self, write: Write, *, size: int = 256, delay: float = 0.1, limit: int = 10_000
    ) -> None:
        if size < 1 or limit < size or delay < 0:
            raise ValueError("a batch holds >= 1 record, the queue >= a batch, delay >= 0")
        self._write = write
        self.size, self.delay, self.limit = size, delay, limit
        self._pending: list[Item] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        #: Records dropped because the queue was full (the store far behind the traffic).
        self.dropped = 0
        self._overflowing = False

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the writes run on (the first ``put``'s), None before any."""
        return self._loop

    def put(self, team: str, data: bytes) -> None:
        """Queue one record (on the event loop); it is written within ``delay`` seconds."""
        if len(self._pending) >= self.limit:
            self.dropped += 1
            if not self._overflowing:
                log.warning("request log: the store is behind, records dropped (queue full)")
            self._overflowing = True
            return
        self._overflowing = False
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the first record, or an app served again on a new loop
            self._loop, self._timer, self._task = loop, None, None
        self._pending.append((team, data))
        if self._task is not None:
            return  # the running write looks again when it ends
        if len(self._pending) >= self.size:
            self._start()
        elif self._timer is None:
            self._timer = self._loop.call_later(self.delay, self._start)

    def _start(self, everything: bool = False) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is None and self._pending and self._loop is not None:
            self._task = self._loop.create_task(self._drain(everything))

    async def _drain(self, everything: bool) -> None:
        """Write batches while a whole one is waiting (everything, when flushing); what is
        left waits for the next timer."""
        try:
            while self._pending:
                batch = self._pending[: self.size]
                del self._pending[: len(batch)]
                try:
                    await self._write(batch)
                except Exception:
                    log.exception("request log: a batch of %d records was not written", len(batch))
                if not everything and len(self._pending) < self.size:
                    break
        finally:
            self._task = None
            if self._pending and self._timer is None and self._loop is not None:
                self._timer = self._loop.call_later(self.delay, self._start)

    async def flush(self) -> None:
        """Write every record waiting now (and wait for a write under way)."""
        while self._task is not None or self._pending:
            if self._task is None:
                self._start(everything=True)
            task = self._task
            if task is not None:
                await asyncio.shield(task)

    def flush_from_thread(self, timeout: float) -> None:
        """``flush`` from a thread other than the loop's (the lifespan's end closes the sinks
        in a worker thread); nothing to do when nothing waits or the loop no longer runs."""
        loop = self._loop
        if loop is None or not loop.is_running() or (not self._pending and self._task is None):
            return
        asyncio.run_coroutine_threadsafe(self.flush(), loop).result(timeout)
