"""No reservation outlives its request: whatever ends it, a team's quota returns to what was
served.

Each test holds a reservation through ``proxy.budgets.Budgets`` on a real store (SQLite, a
private Redis) and ends it the way a request can end badly — its task cancelled while the store
works (the drain's deadline), the store away when it settles — then reads the team's window:

* a reservation the store made while its caller was being cancelled was kept for the rest of
  its window (a month, for a dollar quota), nobody holding its token to release it;
* a settlement the store could not take (a blip) kept the whole reservation for the rest of the
  window, though the store answered again a moment later;
* a Redis reservation whose reply was lost (a slow host: the attempt timed out after the script
  ran) and whose call was retried (Cluster and Sentinel retry by default) was charged twice,
  the first never to be released;
* many requests at once at a quota's edge are admitted up to the quota, never past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit

import pytest
from harness import private_redis

from proxy.budgets import Budgets, Held
from proxy.config import RouteConfig, parse_config
from proxy.metrics import Metrics
from proxy.store import BudgetWindow, Store
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from proxy.teams import Quotas, Team
from proxy.usage import Usage

pytestmark = pytest.mark.anyio

PROMPT, OUTPUT = 120, 880  # one request's reservation: 1,000 tokens


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def route() -> RouteConfig:
    entry = {
        "model_name": "gpt",
        "litellm_params": {"model": "openai/gpt-4o", "api_base": "http://127.0.0.1:9/v1"},
        "model_info": {"max_input_tokens": 128_000, "max_output_tokens": 16_384},
    }
    config = parse_config({"model_list": [entry]}, "c.yaml", environ={})
    return config.routes["gpt"]


def team(limit: int = 10**9) -> Team:
    """A team of its own (its own counters in a shared Redis) with one day's token quota."""
    quotas = Quotas(tokens_per_day=limit)
    return Team("leak-" + uuid.uuid4().hex[:8], (), None, quotas)


async def used(budgets: Budgets, t: Team) -> int:
    (window,) = await budgets.usage(t)
    return window.used


async def settles_to(budgets: Budgets, t: Team, expected: int) -> int:
    """The team's window once it reads ``expected`` (what is left runs off the caller's path),
    or what it reads when a generous bound of the loop's turns has passed."""
    for _ in range(500):
        now = await used(budgets, t)
        if now == expected:
            return now
        await asyncio.sleep(0.01)
    return await used(budgets, t)


@pytest.fixture(params=["sqlite", "redis"])
async def budgets(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[Budgets]:
    store: Store = SqliteStore(":memory:") if request.param == "sqlite" else RedisStore(redis_url)
    try:
        yield Budgets(store, Metrics())
    finally:
        await store.close()


async def _cancelled(work: Callable[[], Awaitable[object]]) -> None:
    """``work`` run as a request's task and cancelled at its first wait (the store's answer)."""
    task = asyncio.ensure_future(work())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_reservation_whose_caller_is_cancelled_is_released(
    budgets: Budgets, route: RouteConfig
) -> None:
    t = team()
    await _cancelled(lambda: budgets.reserve(t, route, PROMPT, OUTPUT))
    # before: SQLite's thread charged 1,000 tokens that no request held a token for
    assert await settles_to(budgets, t, 0) == 0


async def test_a_settlement_whose_caller_is_cancelled_is_made(
    budgets: Budgets, route: RouteConfig
) -> None:
    t = team()
    held = await budgets.reserve(t, route, PROMPT, OUTPUT)
    assert held is not None and await used(budgets, t) == PROMPT + OUTPUT
    served = Usage(PROMPT, 7)
    await _cancelled(lambda: budgets.settle(held, served, released=False))
    assert await settles_to(budgets, t, PROMPT + 7) == PROMPT + 7


async def test_a_settlement_the_store_missed_is_made_once_it_is_back(route: RouteConfig) -> None:
    t = team()
    with private_redis(persistent=True) as server:  # the counters survive the outage
        store = RedisStore(server.url, timeout=0.2)
        budgets = Budgets(store, Metrics())
        try:
            held = await budgets.reserve(t, route, PROMPT, OUTPUT)
            assert held is not None
            server.kill()
            await budgets.settle(held, Usage(PROMPT, 7), released=False)  # swallowed
            server.start()
            other: Held | None = None
            for _ in range(100):  # the client reconnects; the store's next answer retries
                other = await budgets.reserve(t, route, PROMPT, OUTPUT)
                if other is not None:
                    break
                await asyncio.sleep(0.05)
            assert other is not None
            # before: 2,000 — the first reservation kept whole until the day ends
            expected = PROMPT + 7 + PROMPT + OUTPUT
            assert await settles_to(budgets, t, expected) == expected
            await budgets.settle(other, None, released=True)
            assert await settles_to(budgets, t, PROMPT + 7) == PROMPT + 7
        finally:
            await store.close()


async def test_many_requests_at_a_quotas_edge_are_admitted_up_to_it(
    budgets: Budgets, route: RouteConfig
) -> None:
    fits = 7
    t = team(limit=fits * (PROMPT + OUTPUT) + PROMPT)  # room for 7 and a bit, not for 8

    async def one() -> Held | None:
        try:
            return await budgets.reserve(t, route, PROMPT, OUTPUT)
        except Exception:
            return None

    held = await asyncio.gather(*(one() for _ in range(40)))
    admitted = [h for h in held if h is not None]
    assert len(admitted) == fits
    assert await used(budgets, t) == fits * (PROMPT + OUTPUT)
    for h in admitted:
        await budgets.settle(h, None, released=True)
    assert await used(budgets, t) == 0


class ReplyLost:
    """A TCP relay before Redis that drops the next reply Redis sends once ``lose()`` is called:
    the command ran, its caller never hears of it (its read times out)."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 6379
        self.losing = False
        self.lost = 0
        self.server: asyncio.Server | None = None

    def lose(self) -> None:
        self.losing = True

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    async def __aenter__(self) -> ReplyLost:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, replies: bool) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    if replies and self.losing:
                        self.losing, self.lost = False, self.lost + 1
                        continue
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer, False), pump(up_reader, writer, True))


async def test_a_redis_reservation_retried_after_its_reply_was_lost_is_charged_once(
    redis_url: str,
) -> None:
    day = BudgetWindow("tokens_per_day", "day", 10**9)
    who = "leak-" + uuid.uuid4().hex[:8]
    async with ReplyLost(redis_url) as relay:
        store = RedisStore(relay.url, timeout=0.2, failover_seconds=2.0)
        try:
            assert (await store.usage(who, [day]))[0].used == 0  # connected, script loaded
            relay.lose()
            made = await store.reserve(who, [(day, 1000)])
            assert relay.lost == 1 and made.admitted and made.token is not None
            # before: 2,000 — the retry charged again, and the first has no token to release it
            assert (await store.usage(who, [day]))[0].used == 1000
            await store.settle(who, made.token, [(day, 0)])
            assert (await store.usage(who, [day]))[0].used == 0
        finally:
            await store.close()
