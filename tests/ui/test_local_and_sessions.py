"""sim:// routes are pointed at a bound loopback port; dashboard sessions live in the store,
expire and end at logout; admin-key guesses are throttled per client."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.config import ConfigError, parse_config
from proxy.errors import ProxyError
from proxy.local_provider import attach
from proxy.store import Store
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from proxy.teams import TeamDirectory, hash_key
from proxy.throttle import LoginThrottle
from proxy.ui.auth import SESSION_SECONDS, Sessions


def _config(model: str):
    data = yaml.safe_load(
        f"""
        model_list:
          - model_name: local
            litellm_params: {{model: openai/{model}, api_base: "sim://local"}}
            model_info: {{max_input_tokens: 8192}}
          - model_name: remote
            litellm_params: {{model: openai/gpt-4o, api_key: sk-x}}
        """
    )
    return parse_config(data, "routes.yaml", environ={})


def test_attach_rewrites_only_sim_routes_to_a_bound_port() -> None:
    config, local = attach(_config("gpt-4o-small"))
    assert local is not None
    try:
        base = config.routes["local"].upstream.api_base
        assert base == local.base_url + "/v1" and base.startswith("http://127.0.0.1:")
        assert config.routes["remote"].upstream.api_base == "https://api.openai.com/v1"
    finally:
        local.sock.close()
    plain = parse_config(
        {"model_list": [{"model_name": "r", "litellm_params": {"model": "openai/gpt-4o"}}]},
        environ={},
    )
    assert attach(plain) == (plain, None)


def test_a_sim_route_for_a_model_the_simulator_lacks_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a simulator model"):
        attach(_config("gpt-5-imaginary"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """The store dashboard sessions live in: the embedded one, and Redis (what replicas share)."""
    made: Store = (
        RedisStore(request.getfixturevalue("redis_url"))
        if request.param == "redis"
        else SqliteStore(":memory:")
    )
    yield made
    await made.close()


def _sessions(store: Store, admin: str = "admin", master: str | None = None) -> Sessions:
    hashes = tuple(hash_key(k) for k in (admin, master) if k is not None)
    directory = TeamDirectory([], hash_key(admin), hash_key(master) if master else None)
    return Sessions(directory, hashes, store)


@pytest.mark.anyio
async def test_sessions_need_the_admin_key_expire_and_end_at_logout(store: Store) -> None:
    sessions, replica = _sessions(store, master="master"), _sessions(store, master="master")
    with pytest.raises(ProxyError) as info:
        await sessions.login("guess", "10.0.0.1")
    assert info.value.status == 403
    token = await sessions.login("admin", "10.0.0.1")
    assert len(token) == 43 and await sessions.valid(token) and await replica.valid(token)
    await replica.authorize({}, {"routefit_ui": token}, "10.0.0.2")  # another replica
    copy = token  # a cookie copied off the browser
    await sessions.logout(token)
    assert not await sessions.valid(copy) and not await replica.valid(copy)
    with pytest.raises(ProxyError) as info:
        await replica.authorize({}, {"routefit_ui": copy}, "10.0.0.2")
    assert info.value.status == 401
    by_master = await sessions.login("master", "10.0.0.1")  # LiteLLM's master key signs in too
    assert await sessions.valid(by_master)
    assert not await sessions.valid(by_master, now=time.time() + SESSION_SECONDS + 1)
    assert not await _sessions(store, "rotated").valid(by_master)  # a new key ends sessions
    await sessions.authorize({"authorization": "Bearer admin"}, {}, "10.0.0.1")
    await sessions.authorize({"x-api-key": "master"}, {}, "10.0.0.1")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cookie=st.one_of(st.text(), st.text(min_size=43, max_size=43), st.just("é" * 100_000)),
    key=st.one_of(st.text(), st.just("\udcff"), st.just("ß" * 100_000)),
)
def test_no_cookie_or_key_makes_the_check_raise_anything_but_a_refusal(cookie, key) -> None:
    """Any text as a cookie or a key (non-ASCII, lone surrogates, empty, 100k characters) is
    refused (401/403, or 429 once locked out) — never a TypeError or a 500."""

    async def check() -> None:
        store = SqliteStore(":memory:")
        sessions = _sessions(store)
        try:
            for headers in ({}, {"authorization": f"Bearer {key}"}, {"x-api-key": key}):
                try:
                    await sessions.authorize(headers, {"routefit_ui": cookie}, "c")
                except ProxyError as err:
                    assert err.status in (401, 403, 429), err.message
            try:
                await sessions.login(key, "c")
            except ProxyError as err:
                assert err.status in (400, 403, 429)
            assert not await sessions.valid(cookie)
            await sessions.logout(cookie)
        finally:
            await store.close()

    asyncio.run(check())


def test_the_login_throttle_locks_a_client_out_exponentially() -> None:
    now = [1000.0]
    throttle = LoginThrottle(free=5, base=1.0, cap=60.0, clock=lambda: now[0])
    directory = TeamDirectory([], hash_key("admin"), throttle=throttle)
    sessions = Sessions(directory, (hash_key("admin"),), SqliteStore(":memory:"))

    def attempt(key: str, client: str = "198.51.100.7") -> int:
        try:
            asyncio.run(sessions.login(key, client))
        except ProxyError as err:
            return err.status
        return 204

    assert [attempt(f"guess-{i}") for i in range(6)] == [403] * 6  # 5 free, the 6th locks 1 s
    assert attempt("admin") == 429  # locked: not even the right key is looked at
    assert attempt("admin", "198.51.100.8") == 204  # another client is not affected
    waits = []
    for _ in range(8):
        try:
            throttle.check("198.51.100.7")
        except ProxyError as err:
            waits.append(int(err.headers["retry-after"]))
        now[0] += waits[-1] if waits else 0
        attempt("still-guessing")
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60]  # doubling, capped
    now[0] += 60
    assert attempt("admin") == 204
    assert attempt("guess") == 403  # a success cleared the record: free attempts again


@settings(max_examples=300, deadline=None)
@given(gaps=st.lists(st.floats(min_value=0, max_value=120), max_size=300))
def test_a_guessing_client_gets_logarithmically_few_keys_checked(gaps) -> None:
    """Whatever the pace of its attempts, a client gets at most the free failures, one per
    doubling of the elapsed time, then one per capped lock-out: an invariant, not a schedule."""
    now = [0.0]
    throttle = LoginThrottle(free=5, base=1.0, cap=900.0, clock=lambda: now[0])
    checked = 0
    for gap in gaps:
        now[0] += gap
        try:
            throttle.check("203.0.113.9")
        except ProxyError as err:
            assert err.status == 429 and int(err.headers["retry-after"]) >= 1
            continue
        checked += 1
        throttle.failed("203.0.113.9")
    elapsed = now[0]
    assert checked <= 5 + 2 + math.log2(elapsed + 1) + elapsed / 900


def test_a_flood_of_addresses_cannot_grow_the_throttle_without_bound() -> None:
    throttle = LoginThrottle(max_clients=100, clock=lambda: 0.0)
    for i in range(10_000):
        throttle.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(throttle) == 100
    throttle.failed("10.0.39.15")  # the newest are kept, the oldest dropped
    assert len(throttle) == 100
