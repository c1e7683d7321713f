"""CPU fairness: one team's big inputs must not stall every other team's requests.

routefit prices requests on one event loop per worker. Tokenizing a 9 MB body takes seconds;
run on the loop, it holds ``/healthz`` and every team's requests for that long. Two rules:

* **off the loop, bounded per team**: what counts a body's text (pricing, proving, fitting) runs
  in a worker thread when the body is over ``COUNT_THREAD_ABOVE`` bytes, and what only reads it
  (parsing, hashing, writing it back) when it is over ``THREAD_ABOVE`` (a body carrying a PDF,
  audio or video is over both: ``work_size``; a body's size counts each JSON object in it as
  ``OBJECT_BYTES`` when that is more than its bytes: ``json_work``); the tokenizers release the
  GIL, and one team holds at most ``pricing_threads_per_team`` such threads at once — its next
  big body waits for one of its own, never for another team's;
* **count and dry-run endpoints are rate-limited per team** (``count_requests_per_minute``, a
  token bucket with a burst of as many): they cost routefit CPU and nothing at the provider, so
  no budget charges them, and an unbounded loop of them is the cheapest way to burn a replica.
  Over the rate the answer is a 429 in the endpoint's wire shape with ``retry-after``;
* **bodies in memory are bounded per team** (``body_bytes_in_flight_per_team``): a request's
  decoded body (and what is parsed from it) lives until its answer is done, and a gzip body of
  30 KB inflates to 30 MB: twenty such requests of one team, 585 KB on the wire, held 3.5 GB of
  the worker's memory, enough of them would have it killed, and every team with it. Each body's
  decoded bytes are counted against its caller's share as they are read (``BodyShare``); past
  the share the request is a 429 with ``retry-after``, let go when the requests holding it end.
  A caller's first body always fits, however big (it is held to ``max_body_bytes`` anyway).

The bucket and the limiters live in the process: each replica (and each worker) enforces the
rate on its own share of the traffic, so N replicas admit up to N times the rate. That bounds
what one client can make one process do, which is the point; a fleet-wide count quota would
belong in the store next to the token budgets.

Callers without a team (an open deployment) are keyed by their address.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread
from starlette.requests import Request

from pricing.documents import is_document
from pricing.messages import ChatRequest
from pricing.recordings import is_recording
from proxy.errors import ProxyError
from proxy.teams import Team

__all__ = [
    "COUNT_THREAD_ABOVE",
    "OBJECT_BYTES",
    "THREAD_ABOVE",
    "BodyShare",
    "Fairness",
    "caller",
    "json_work",
    "work_size",
]

T = TypeVar("T")

#: Bodies above this many bytes are parsed, hashed and written back in a worker thread: reading
#: 512 KB costs a few ms, a thread hop ~0.1 ms.
THREAD_ABOVE = 512 * 1024
#: Bodies above this many bytes are priced, proved and fitted in a worker thread: counting text no
#: one sent before costs 30-80 ms a MB, so a 480 KB prompt of new text held the loop — and every
#: other team's requests — for 15-40 ms (one client sending such prompts took another's small
#: requests from 2 to 55-72 ms p50: bench/REPORT.md, 1o); 64 KB is at most a few ms on the loop,
#: where the hop would cost more than it saves.
COUNT_THREAD_ABOVE = 64 * 1024
#: What one JSON object of a body weighs, in bytes, when its work is judged (``json_work``): what
#: the wires read and price object by object (a message, a part, an item, a tool, a tool call)
#: costs per object, not per byte — 4-23 µs each to parse (a Responses item the most), ~25 µs
#: each to price — and a body of tiny ones packs ~17,000 into the 512 KiB read on the loop: a
#: 498 KB Responses body of 15,000 one-letter items held the loop 220-350 ms in its parse alone,
#: a 220 KB Gemini content of 15,000 parts ~100 ms. 512 bytes of text cost about what an object
#: does (~50 ns a byte to read, 30-80 ms a MB to count), so a body is judged by whichever is more.
OBJECT_BYTES = 512
#: Callers whose buckets are kept; past this the least recently seen are forgotten (a forgotten
#: caller starts again with a full bucket: the bound only ever errs toward admitting).
_MAX_CALLERS = 10_000


def json_work(raw: bytes) -> int:
    """The size a JSON body's work is judged by (``Fairness.run``): its bytes, or
    ``OBJECT_BYTES`` per object in it when that is more — a body of many tiny messages, parts or
    items costs by its objects (``OBJECT_BYTES``), and judged by its bytes alone it was parsed and
    priced on the loop. Objects are counted as the ``{`` in it (C speed: ~0.1 ms for 512 KiB);
    one inside a string counts too, which errs toward a thread hop (~0.1 ms), never toward the
    loop. A body over ``THREAD_ABOVE`` is over every threshold already and is not scanned."""
    if len(raw) > THREAD_ABOVE:
        return len(raw)
    return max(len(raw), raw.count(b"{") * OBJECT_BYTES)


def work_size(request: ChatRequest, size: int) -> int:
    """The size a request's pricing is judged by: its body's, or over ``THREAD_ABOVE`` when it
    carries a PDF, audio or video — reading a PDF costs ~5 ms a page (``pricing.documents``), so a
    200 KB body of PDFs can cost what a 9 MB body of text does (an already-read file costs a
    digest, but which are new is known only by reading)."""
    if size <= THREAD_ABOVE and any(
        is_document(p.url) or is_recording(p.url) for m in request.messages for p in m.images
    ):
        return THREAD_ABOVE + 1
    return size


def caller(team: Team | None, request: Request) -> str:
    """Whose share a request spends: its team, else its client address."""
    if team is not None:
        return "team:" + team.id
    host = request.client.host if request.client is not None else "-"
    return "addr:" + host


#: Rounding slack of a refilled bucket (``admit_count``).
_EPSILON = 1e-9


class Fairness:
    """Per-caller pricing threads and count-endpoint rate of one process."""

    def __init__(self, threads_per_caller: int, counts_per_minute: int) -> None:
        self.threads_per_caller = threads_per_caller
        self.rate = counts_per_minute / 60.0
        self.burst = float(counts_per_minute)
        self._limiters: dict[str, anyio.CapacityLimiter] = {}
        self._buckets: dict[str, tuple[float, float]] = {}
        #: Decoded body bytes each caller holds now (only callers holding any: it shrinks).
        self._in_flight: dict[str, int] = {}

    def body_share(self, who: str, cap: int) -> BodyShare:
        """One request's share of ``who``'s body bytes in flight (at most ``cap`` together)."""
        return BodyShare(self._in_flight, who, cap)

    def limiter(self, who: str) -> anyio.CapacityLimiter:
        found = self._limiters.get(who)
        if found is None:
            if len(self._limiters) >= _MAX_CALLERS:
                self._forget_idle()
            found = self._limiters[who] = anyio.CapacityLimiter(self.threads_per_caller)
        return found

    def _forget_idle(self) -> None:
        for key in [k for k, lim in self._limiters.items() if lim.borrowed_tokens == 0]:
            del self._limiters[key]

    async def run(
        self, who: str, size: int, fn: Callable[..., T], *args: object, above: int = THREAD_ABOVE
    ) -> T:
        """``fn(*args)``: in one of ``who``'s pricing threads when ``size`` is over ``above``
        (``COUNT_THREAD_ABOVE`` for work that counts text), else right here (a thread hop costs
        more than a small body)."""
        if size <= above:
            return fn(*args)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter(who))

    def admit_count(self, who: str, now: float | None = None) -> None:
        """Spend one count/dry-run request of ``who``'s bucket; a 429 with ``retry-after`` when
        it is empty."""
        now = time.monotonic() if now is None else now
        tokens, then = self._buckets.pop(who, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        # a bucket refilled for exactly the wait it named holds 1 - ε after float rounding:
        # that wait must be enough (the retry-after promise), so the last ulps count as whole
        if tokens < 1.0 - _EPSILON:
            self._buckets[who] = (tokens, now)
            retry = max(1, math.ceil((1.0 - tokens) / self.rate))
            raise ProxyError(
                429,
                f"too many count and dry-run requests: at most "
                f"{int(self.burst)} a minute per team; retry in {retry}s",
                code="rate_limit_exceeded",
                headers={"retry-after": str(retry)},
            )
        self._buckets[who] = (tokens - 1.0, now)  # re-inserted: most recently seen last
        if len(self._buckets) > _MAX_CALLERS:
            del self._buckets[next(iter(self._buckets))]


class BodyShare:
    """The decoded body bytes one request holds of its caller's share (``Fairness.body_share``):
    taken as the body grows, given back once, when the request is done (``release``)."""

    __slots__ = ("_held", "_in_flight", "cap", "who")

    def __init__(self, in_flight: dict[str, int], who: str, cap: int) -> None:
        self._in_flight = in_flight
        self.who = who
        self.cap = cap
        self._held = 0

    def grow_to(self, size: int) -> None:
        """Hold ``size`` bytes in all for this request; a 429 when that takes the caller past
        its share while it holds anything for other requests (a lone body always fits)."""
        more = size - self._held
        if more <= 0:
            return
        now = self._in_flight.get(self.who, 0)
        others = now - self._held
        if others > 0 and now + more > self.cap:
            raise ProxyError(
                429,
                f"too many request bytes in flight: at most {self.cap:,} bytes of request "
                "bodies per team at once; retry when earlier requests have finished",
                code="request_bytes_in_flight",
                headers={"retry-after": "1"},
            )
        self._in_flight[self.who] = now + more
        self._held = size

    def release(self) -> None:
        """Give back what this request holds (idempotent)."""
        if self._held == 0:
            return
        left = self._in_flight.get(self.who, 0) - self._held
        self._held = 0
        if left > 0:
            self._in_flight[self.who] = left
        else:
            self._in_flight.pop(self.who, None)
