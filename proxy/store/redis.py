"""The shared store: Redis (``redis.asyncio``, one connection pool per store).

Key layout (every key of one route / one team shares a hash tag, so each operation stays in one
Redis Cluster slot):

- ``{rf:route:<route>}:samples`` — stream, one entry per sample (field ``s``: JSON array),
  trimmed with ``MAXLEN ~ sample_cap``, expires ``sample_ttl`` after the last write;
- ``{rf:route:<route>}:anchor:<hex key>`` — string (JSON array), ``PX ttl``;
- ``{rf:team:<team>}:w:<window name>:<bucket id>`` — integer counter, expires at the end of its
  window plus a slack (``codec.BUCKET_SLACK``);
- ``{rf:team:<team>}:settled:<token id>`` — marker that makes ``settle`` idempotent, expires
  with the last bucket of its reservation;
- ``{rf:team:<team>}:reserved:<token id>`` — the reply of an admitted ``reserve`` (its
  numbers, comma-separated), which makes a retried ``reserve`` idempotent; expires likewise;
- ``{rf:team:<team>}:resp:<response id>`` — a stored response (bytes), ``PX ttl``;
- ``{rf:team:<team>}:resps`` — sorted set of the team's stored response ids (score: the unix
  millisecond each expires), ``{rf:team:<team>}:resps:size`` — hash of their sizes,
  ``{rf:team:<team>}:resps:bytes`` — their total: the team's bound on stored bytes, kept by
  ``_LUA_RESPONSES`` (one script, one slot); each expires with the team's last record;
- ``{rf:team:<team>}:requests`` — list, the team's request records newest first (``LPUSH``),
  trimmed to the cap (``LTRIM``), expires ``sample_ttl`` after the last write;
- ``{rf:dep:<deployment>}:h`` — hash of one deployment's health (``in_flight``, ``latency``,
  ``cool``: its cooldown's end), ``{rf:dep:<deployment>}:f`` — sorted set of its failures
  (score: when), ``{rf:dep:<deployment>}:u:<minute>`` — hash of that minute's ``requests`` and
  ``tokens``; each expires ``HEALTH_TTL`` (the minute's: 120 s) after its last write. Reading the
  health of an alias's deployments is one pipeline (one round trip per node on a Cluster).

Budgets run in one Lua script (``_LUA``, loaded once, called with EVALSHA) with three modes:
``reserve``, ``settle`` and ``usage``. It reads the server clock (``TIME``), so replicas with
skewed clocks agree on the window buckets. See docs/store.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    ReadOnlyError,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from pricing.calibration import Anchor, Sample
from proxy.store.base import (
    FAILURE_WINDOW,
    HEALTH_TTL,
    AnchorWrite,
    BudgetWindow,
    DeploymentHealth,
    Reservation,
    StoreObserver,
    StoreUnavailable,
    WindowState,
    anchor_keys,
    check_request_cap,
    check_response_args,
    check_team_bytes,
    deployment_tag,
    requests_key,
    response_key,
    route_tag,
    team_tag,
)
from proxy.store.codec import (
    BUCKET_SLACK,
    ReservedBucket,
    check_amounts,
    check_kind,
    decode_anchor,
    decode_sample,
    decode_token,
    encode_anchor,
    encode_sample,
    encode_token,
    new_token_id,
    settle_deltas,
)
from proxy.store.topology import Client, standalone_client

__all__ = ["LUA_CALENDAR", "RedisStore"]

T = TypeVar("T")

#: Window bucket math in Lua, the same as ``base.window_bucket`` (minute / day since the epoch;
#: UTC calendar month as ``year * 12 + month - 1`` via Howard Hinnant's civil-from-days).
LUA_CALENDAR = """
local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- (bucket id, unix second at which the bucket ends) of a window kind at unix second s
local function bucket_of(kind, s)
  if kind == 'minute' then
    local b = math.floor(s / 60)
    return b, (b + 1) * 60
  elseif kind == 'day' then
    local b = math.floor(s / 86400)
    return b, (b + 1) * 86400
  elseif kind == 'month' then
    local y, m = civil_from_days(math.floor(s / 86400))
    local ny, nm = y, m + 1
    if nm == 13 then ny, nm = y + 1, 1 end
    return y * 12 + m - 1, days_from_civil(ny, nm, 1) * 86400
  end
  error('unknown budget window kind ' .. tostring(kind))
end
"""

_LUA_BUDGET = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local s = tonumber(t[1])
local ms = math.floor(tonumber(t[2]) / 1000)
local mode = ARGV[1]

if mode == 'reserve' then
  -- KEYS[1]: this reservation's marker; KEYS[i + 1]: window key prefix;
  -- ARGV[4i-2 .. 4i+1]: kind, limit, amount, slack. A reservation made before (its reply lost,
  -- the call retried) answers what it answered then and charges nothing more.
  local made = redis.call('GET', KEYS[1])
  if made then
    local again = {}
    for v in string.gmatch(made, '[^,]+') do again[#again + 1] = tonumber(v) end
    return again
  end
  local n = #KEYS - 1
  local keys, amounts, used, resets, expires = {}, {}, {}, {}, {}
  local buckets = {}
  local admitted = true
  local retry = 0
  for i = 1, n do
    local j = 4 * i - 2
    local limit, amount = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    local b, e = bucket_of(ARGV[j], s)
    local key = KEYS[i + 1] .. ':' .. string.format('%d', b)
    local u = tonumber(redis.call('GET', key) or '0')
    local reset = (e - s) * 1000 - ms
    if amount > 0 and u + amount > limit then
      if admitted then retry = reset end
      admitted = false
    end
    keys[i], amounts[i], used[i], resets[i] = key, amount, u, reset
    buckets[i], expires[i] = b, e + tonumber(ARGV[j + 3])
  end
  if admitted then
    for i = 1, n do
      if amounts[i] > 0 then
        used[i] = redis.call('INCRBY', keys[i], ARGV[4 * i])
        redis.call('EXPIREAT', keys[i], expires[i])
      end
    end
  end
  local out = {admitted and 1 or 0, retry}
  for i = 1, n do
    local k = 4 * i - 1
    out[k], out[k + 1], out[k + 2], out[k + 3] = buckets[i], used[i], resets[i], expires[i]
  end
  if admitted then
    local parts, last = {}, 0
    for i = 1, #out do parts[i] = string.format('%d', out[i]) end
    for i = 1, n do
      if expires[i] > last then last = expires[i] end
    end
    redis.call('SET', KEYS[1], table.concat(parts, ','), 'EXAT', last)
  end
  return out

elseif mode == 'settle' then
  -- KEYS[1]: settled marker; KEYS[i + 1]: bucket key; ARGV[2i], ARGV[2i + 1]: delta, expires_at
  local n = #KEYS - 1
  local last = 0
  for i = 1, n do
    local e = tonumber(ARGV[2 * i + 1])
    if e > last then last = e end
  end
  if last <= s then return 0 end
  if not redis.call('SET', KEYS[1], '1', 'NX', 'EXAT', last) then return -1 end
  for i = 1, n do
    local key, delta, e = KEYS[i + 1], tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
    if delta ~= 0 and e > s then
      if redis.call('EXISTS', key) == 1 then
        if redis.call('INCRBY', key, ARGV[2 * i]) < 0 then
          redis.call('SET', key, '0', 'KEEPTTL')
        end
      elseif delta > 0 then
        redis.call('SET', key, ARGV[2 * i], 'EXAT', e)
      end
    end
  end
  return 1

elseif mode == 'usage' then
  -- KEYS[i]: window key prefix; ARGV[i + 1]: kind
  local out = {}
  for i = 1, #KEYS do
    local b, e = bucket_of(ARGV[i + 1], s)
    local u = redis.call('GET', KEYS[i] .. ':' .. string.format('%d', b))
    out[2 * i - 1], out[2 * i] = tonumber(u or '0'), (e - s) * 1000 - ms
  end
  return out
end
error('unknown mode ' .. tostring(mode))
"""

_LUA = LUA_CALENDAR + _LUA_BUDGET

#: A cooldown's end kept at its latest: KEYS[1] the health hash, ARGV[1] the end, ARGV[2] TTL.
_LUA_COOL = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'cool') or '0')
if tonumber(ARGV[1]) > cur then redis.call('HSET', KEYS[1], 'cool', ARGV[1]) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""


#: A team's stored responses and their byte total, atomically (``put_response``,
#: ``delete_response``, ``response_bytes``). KEYS: the index (sorted set by expiry, ms), the
#: sizes (hash), the total (string), the record. ARGV: mode, id, record prefix, then for ``put``
#: the data, TTL (ms) and bound (-1: none). Every mode first releases the expired records'
#: bytes (Redis expired the records themselves); ``put`` then evicts the team's records nearest
#: their expiry until the new one fits. The evicted records' keys are built from the prefix
#: (the team's hash tag: the same slot as KEYS, so a Cluster runs the script on one node).
#: Returns {stored or deleted (1/0), the team's bytes after}.
_LUA_RESPONSES = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local idx, sizes, total, key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local mode, id, prefix = ARGV[1], ARGV[2], ARGV[3]
local used = tonumber(redis.call('GET', total) or '0')

local function release(rid)
  used = used - tonumber(redis.call('HGET', sizes, rid) or '0')
  redis.call('HDEL', sizes, rid)
  redis.call('ZREM', idx, rid)
end

for _, rid in ipairs(redis.call('ZRANGEBYSCORE', idx, '-inf', now)) do release(rid) end

local function evict_oldest()
  local oldest = redis.call('ZRANGE', idx, 0, 0)
  if #oldest == 0 then
    used = 0  -- nothing indexed holds bytes: a total left over from a lost index reads 0
    return false
  end
  release(oldest[1])
  redis.call('DEL', prefix .. oldest[1])
  return true
end

local function keep()
  if redis.call('ZCARD', idx) == 0 then
    used = 0
    redis.call('DEL', idx, sizes, total)
    return
  end
  local last = redis.call('ZRANGE', idx, -1, -1, 'WITHSCORES')
  redis.call('SET', total, used, 'PXAT', last[2])
  redis.call('PEXPIREAT', idx, last[2])
  redis.call('PEXPIREAT', sizes, last[2])
end

local done = 0
if mode == 'put' then
  local data, ttl, bound = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  local size = string.len(data)
  if bound < 0 or size <= bound then
    if redis.call('HEXISTS', sizes, id) == 1 then release(id) end
    if bound >= 0 then
      while used + size > bound and evict_oldest() do end
    end
    redis.call('SET', key, data, 'PX', ttl)
    redis.call('ZADD', idx, now + ttl, id)
    redis.call('HSET', sizes, id, size)
    used = used + size
    done = 1
  end
elseif mode == 'delete' then
  done = redis.call('DEL', key)
  if redis.call('HEXISTS', sizes, id) == 1 then release(id) end
elseif mode ~= 'bytes' then
  error('unknown mode ' .. tostring(mode))
end
keep()
return {done, used}
"""


def _responses_keys(team: str, response_id: str) -> list[str]:
    """The keys ``_LUA_RESPONSES`` touches for one record: all under the team's hash tag."""
    tag = team_tag(team)
    record = response_key(team, response_id)
    return [f"{tag}:resps", f"{tag}:resps:size", f"{tag}:resps:bytes", record]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _window_prefix(team: str, name: str) -> str:
    return f"{team_tag(team)}:w:{name}"


#: Errors a failover produces (a dead node, a slot in flight, a demoted master, a promotion in
#: progress): retried within ``failover_seconds``. Any other Redis error is reported at once.
_TRANSIENT: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    ClusterError,
    TryAgainError,
    AskError,  # MovedError too (a subclass): redis-py follows them itself, up to a TTL
    ReadOnlyError,
)


def _transient(e: Exception) -> bool:
    """Whether a failed attempt may succeed when retried. Besides the Redis errors above, any
    exception that is not a ``RedisError`` is the client failing, not Redis refusing — and must
    still reach the caller as ``StoreUnavailable`` (a 503 or an unbudgeted request, per
    ``budget_failure_mode``; never a 500). Three were seen with a cluster master killed under
    load: the cluster client's slot-map refresh raises ``RedisClusterException`` while no node
    it asks serves every slot; under uvloop, writing to a connection the dead node closed
    raises ``RuntimeError`` (redis-py maps only ``OSError``); and a refresh that fails closes
    every node's connections, in use or not, so a command being sent on one meets
    ``AttributeError`` (its writer gone). Each drops the connection, so a retry reconnects.
    ``OSError`` covers ``TimeoutError``, our per-attempt cut. (``ValueError`` and ``TypeError``
    — a bad argument — never get here: ``_call`` lets them through unchanged.)"""
    return isinstance(e, _TRANSIENT) or not isinstance(e, RedisError)


_FIRST_BACKOFF = 0.05
_MAX_BACKOFF = 0.4


class RedisStore:
    """The store contract on Redis, for N replicas sharing one Redis, a Redis Cluster or a
    Sentinel-managed master (``proxy.store.topology`` builds the client).

    Every call is bounded: ``timeout`` is the socket connect/read timeout and the wait for a
    connection, and each attempt is cut at ``2 * timeout``. Transient failures (connection
    errors, MOVED/ASK beyond redis-py's own handling, CLUSTERDOWN, TRYAGAIN, READONLY) are
    retried with a short backoff for ``failover_seconds`` (0: one attempt), so a failover of a
    few seconds does not fail calls; after that the call raises ``StoreUnavailable``.

    With ``failover_seconds`` > 0 a call is retried at least once, however long its first
    attempt took: the client learns a failover only from a failure (the cluster client
    refreshes its slot map after a connection error, a Sentinel pool asks the sentinels again
    for a new connection), so the first attempt after a promotion may fail on the old master;
    the second runs on the topology that failure made the client re-learn. Without it, a first
    attempt slowed down by a loaded host could use up a short ``failover_seconds`` and fail a
    call after the cluster already had its new master.
    """

    name = "redis"
    shared = True

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Client | None = None,
        timeout: float = 0.5,
        sample_cap: int = 2000,
        max_connections: int = 64,
        sample_ttl: float = 30 * 86_400,
        failover_seconds: float = 0.0,
        observer: StoreObserver | None = None,
        replicas: int = 0,
    ) -> None:
        if sample_cap < 1:
            raise ValueError("sample_cap must be >= 1")
        if client is None:
            if not url:
                raise ValueError("RedisStore needs a url or a client")
            client = standalone_client(url, timeout, max_connections)
        self.sample_cap = sample_cap
        self._timeout = timeout
        self._deadline = 2 * timeout
        self._failover = failover_seconds
        self._observer = observer
        #: Replicas a budget write waits for (WAIT) before it is acknowledged: with Sentinel, a
        #: failover promotes a replica, and a reservation the old master had not passed on
        #: would be forgotten there — admitting past the quota. A replica that is down (the
        #: old master, right after a failover) delays a write by at most ``_wait_ms``, never
        #: refuses it: WAIT answers at its own timeout, and that answer has to arrive well
        #: inside the socket read timeout (``timeout``) — a WAIT as long as the read timeout
        #: timed every write out once the promoted master had no replica left, retried it
        #: (charging it again) and never recovered. Half the timeout leaves the other half for
        #: Redis's timer granularity and a loaded host.
        self._replicas = replicas
        self._wait_ms = max(1, int(timeout * 1000 / 2))
        self._sample_ttl_ms = int(sample_ttl * 1000)
        self._redis, self._close = client
        # Cluster nodes refuse (rather than queue) past their pool size: in-flight calls are
        # capped here instead, and the wait for a slot counts against the attempt's deadline.
        self._slots = asyncio.Semaphore(max_connections)
        self._script = self._redis.register_script(_LUA)
        self._cool = self._redis.register_script(_LUA_COOL)
        self._responses = self._redis.register_script(_LUA_RESPONSES)

    async def _call(self, op: str, attempt: Callable[[], Awaitable[T]]) -> T:
        give_up = time.monotonic() + self._failover
        delay = _FIRST_BACKOFF
        relearn = self._failover > 0  # the one retry owed to a re-learnt topology
        while True:
            try:
                async with asyncio.timeout(self._deadline):
                    async with self._slots:
                        return await attempt()
            except (ValueError, TypeError):
                raise  # a bad argument (encoding a sample, say): no retry can fix it
            except Exception as e:
                if not _transient(e) or (not relearn and time.monotonic() + delay > give_up):
                    raise StoreUnavailable(f"redis: {type(e).__name__}: {e}") from e
                relearn = False
                if self._observer is not None:
                    self._observer.store_retry(op, type(e).__name__)
                await asyncio.sleep(delay)
                delay = min(2 * delay, _MAX_BACKOFF)

    async def _budget(self, op: str, keys: list[str], args: list[str | int]) -> list[int]:
        if not self._replicas or op == "usage":
            result: list[int] = await self._call(op, lambda: self._script(keys=keys, args=args))
            return result

        async def replicated() -> list[int]:
            # One connection for both: WAIT covers the writes made on its own connection.
            async with self._redis.pipeline(transaction=False) as pipe:
                await self._script(keys=keys, args=args, client=pipe)  # type: ignore[arg-type]
                pipe.wait(self._replicas, self._wait_ms)
                written, _acked = await pipe.execute()
            return list(written)

        return await self._call(op, replicated)

    # -- calibration -----------------------------------------------------------------------
    async def record_sample(self, sample: Sample) -> None:
        key = route_tag(sample.route) + ":samples"

        async def op() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.xadd(
                    key, {"s": encode_sample(sample)}, maxlen=self.sample_cap, approximate=True
                )
                pipe.pexpire(key, self._sample_ttl_ms)
                await pipe.execute()

        await self._call("record_sample", op)

    async def record_batch(
        self, samples: Sequence[Sample], anchors: Sequence[AnchorWrite], ttl: float
    ) -> None:
        if ttl <= 0:
            raise ValueError("anchor ttl must be > 0")
        if not samples and not anchors:
            return

        async def op() -> None:
            # A cluster pipeline groups the commands by node and sends each node's in one
            # round trip (all nodes concurrently); every key of a route is in one slot.
            async with self._redis.pipeline(transaction=False) as pipe:
                streams = set()
                for sample in samples:
                    key = route_tag(sample.route) + ":samples"
                    pipe.xadd(
                        key,
                        {"s": encode_sample(sample)},
                        maxlen=self.sample_cap,
                        approximate=True,
                    )
                    streams.add(key)
                for key in streams:
                    pipe.pexpire(key, self._sample_ttl_ms)
                for route, prefix, anchor in anchors:
                    (name,) = anchor_keys(route, [prefix])
                    pipe.set(name, encode_anchor(anchor), px=max(1, round(ttl * 1000)))
                await pipe.execute()

        await self._call("record_batch", op)

    async def recent_samples(self, route: str, limit: int) -> list[Sample]:
        # The stream is trimmed approximately (``MAXLEN ~``); the cap is exact as seen here.
        limit = min(limit, self.sample_cap)
        if limit <= 0:
            return []
        key = route_tag(route) + ":samples"
        entries = await self._call(
            "recent_samples", lambda: self._redis.xrevrange(key, count=limit)
        )
        out = []
        for _id, fields in reversed(entries or []):
            try:
                out.append(decode_sample(route, (fields or {})[b"s"]))
            except (KeyError, ValueError, TypeError):
                continue  # an entry this version cannot read: skip, never fail calibration
        return out

    async def put_anchor(self, route: str, key: bytes, anchor: Anchor, ttl: float) -> None:
        if ttl <= 0:
            raise ValueError("anchor ttl must be > 0")
        (name,) = anchor_keys(route, [key])
        value, px = encode_anchor(anchor), max(1, int(ttl * 1000))
        await self._call("put_anchor", lambda: self._redis.set(name, value, px=px))

    async def find_anchor(self, route: str, keys: Sequence[bytes]) -> tuple[int, Anchor] | None:
        if not keys:
            return None
        names = anchor_keys(route, keys)
        values = await self._call("find_anchor", lambda: self._redis.mget(names))
        for i, value in enumerate(values):
            if value is None:
                continue
            try:
                return i, decode_anchor(value)
            except (ValueError, TypeError):
                continue
        return None

    # -- budgets ---------------------------------------------------------------------------
    async def reserve(self, team: str, windows: Sequence[tuple[BudgetWindow, int]]) -> Reservation:
        check_amounts(windows)
        if not windows:
            return Reservation(True, encode_token(new_token_id(), []), ())
        # The token's id is chosen here, so that a retry of a call whose reply was lost (a
        # timeout after the script ran) finds the reservation made, not a second one nobody
        # holds a token for (kept for the rest of its window).
        token_id = new_token_id()
        keys = [f"{team_tag(team)}:reserved:{token_id}"]
        keys += [_window_prefix(team, w.name) for w, _ in windows]
        args: list[str | int] = ["reserve"]
        for w, amount in windows:
            args += [w.kind, w.limit, amount, BUCKET_SLACK[w.kind]]
        r = await self._budget("reserve", keys, args)
        admitted = r[0] == 1
        states = []
        buckets = []
        for i, (w, amount) in enumerate(windows):
            bucket, used, reset_ms, expires_at = r[2 + 4 * i : 6 + 4 * i]
            states.append(WindowState(w.name, w.limit, used, reset_ms / 1000))
            buckets.append(ReservedBucket(w.name, bucket, amount, expires_at))
        if not admitted:
            return Reservation(False, None, tuple(states), retry_after=r[1] / 1000)
        return Reservation(True, encode_token(token_id, buckets), tuple(states))

    async def settle(
        self, team: str, token: str, windows: Sequence[tuple[BudgetWindow, int]]
    ) -> None:
        check_amounts(windows)
        token_id, buckets = decode_token(token)
        deltas = settle_deltas(buckets, windows)
        if not deltas:
            return
        tag = team_tag(team)
        keys = [f"{tag}:settled:{token_id}"]
        args: list[str | int] = ["settle"]
        for b, delta in deltas:
            keys.append(f"{_window_prefix(team, b.name)}:{b.bucket}")
            args += [delta, b.expires_at]
        await self._budget("settle", keys, args)

    async def usage(self, team: str, windows: Sequence[BudgetWindow]) -> list[WindowState]:
        for w in windows:
            check_kind(w.kind)
        if not windows:
            return []
        keys = [_window_prefix(team, w.name) for w in windows]
        r = await self._budget("usage", keys, ["usage", *(w.kind for w in windows)])
        return [
            WindowState(w.name, w.limit, r[2 * i], r[2 * i + 1] / 1000)
            for i, w in enumerate(windows)
        ]

    # -- stored responses ------------------------------------------------------------------
    async def put_response(
        self,
        team: str,
        response_id: str,
        data: bytes,
        ttl_seconds: int,
        team_bytes: int | None = None,
    ) -> bool:
        check_response_args(response_id, ttl_seconds)
        check_team_bytes(team_bytes)
        value = bytes(data)
        if team_bytes is not None and len(value) > team_bytes:
            return False  # it could never fit: no round trip, nothing evicted
        bound = -1 if team_bytes is None else team_bytes
        args: list[str | int | bytes] = ["put", response_id, response_key(team, "")]
        args += [value, ttl_seconds * 1000, bound]
        done, _ = await self._responses_call("put_response", team, response_id, args)
        return done == 1

    async def get_response(self, team: str, response_id: str) -> bytes | None:
        check_response_args(response_id)
        key = response_key(team, response_id)
        value = await self._call("get_response", lambda: self._redis.get(key))
        return value.encode() if isinstance(value, str) else value

    async def delete_response(self, team: str, response_id: str) -> bool:
        check_response_args(response_id)
        args = ["delete", response_id, response_key(team, "")]
        done, _ = await self._responses_call("delete_response", team, response_id, args)
        return done == 1

    async def response_bytes(self, team: str) -> int:
        # any id names the record key KEYS wants; the mode reads none
        args = ["bytes", "-", response_key(team, "")]
        _, used = await self._responses_call("response_bytes", team, "-", args)
        return int(used)

    async def _responses_call(
        self, op: str, team: str, response_id: str, args: Sequence[str | int | bytes]
    ) -> list[int]:
        """One run of ``_LUA_RESPONSES`` for ``team`` (every key in its slot)."""
        keys = _responses_keys(team, response_id)
        result: list[int] = await self._call(op, lambda: self._responses(keys=keys, args=args))
        return result

    # -- the request log -------------------------------------------------------------------
    async def record_request(self, team: str, data: bytes, cap: int) -> None:
        check_request_cap(cap)
        key, value = requests_key(team), bytes(data)

        async def op() -> None:
            # one slot (the team's hash tag), one round trip; LTRIM right after LPUSH keeps the
            # list at the cap exactly
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.lpush(key, value)
                pipe.ltrim(key, 0, cap - 1)
                pipe.pexpire(key, self._sample_ttl_ms)
                await pipe.execute()

        await self._call("record_request", op)

    async def record_requests(self, items: Sequence[tuple[str, bytes]], cap: int) -> None:
        check_request_cap(cap)
        lists: dict[str, list[bytes]] = {}
        for team, data in items:
            lists.setdefault(requests_key(team), []).append(bytes(data))
        if not lists:
            return

        async def op() -> None:
            # every team's list in its own slot: a cluster pipeline sends each node's commands
            # in one round trip; LPUSH of several values pushes them in order (newest at the head)
            async with self._redis.pipeline(transaction=False) as pipe:
                for key, values in lists.items():
                    pipe.lpush(key, *values)
                    pipe.ltrim(key, 0, cap - 1)
                    pipe.pexpire(key, self._sample_ttl_ms)
                await pipe.execute()

        await self._call("record_requests", op)

    async def recent_requests(self, team: str, limit: int) -> list[bytes]:
        if limit <= 0:
            return []
        key = requests_key(team)
        values = await self._call("recent_requests", lambda: self._redis.lrange(key, 0, limit - 1))
        return [v.encode() if isinstance(v, str) else bytes(v) for v in values or []]

    # -- lifecycle -------------------------------------------------------------------------
    # -- deployment health -----------------------------------------------------------------
    async def deployment_health(
        self, ids: Sequence[str], now: float
    ) -> dict[str, DeploymentHealth]:
        wanted = list(dict.fromkeys(ids))
        minute = int(now // 60)
        if not wanted:
            return {}

        async def op() -> list[object]:
            async with self._redis.pipeline(transaction=False) as pipe:
                for id in wanted:
                    tag = deployment_tag(id)
                    pipe.hmget(f"{tag}:h", ["in_flight", "latency", "cool"])
                    pipe.zrangebyscore(f"{tag}:f", now - FAILURE_WINDOW, "+inf", withscores=True)
                    pipe.hmget(f"{tag}:u:{minute}", ["requests", "tokens"])
                result: list[object] = await pipe.execute()
                return result

        r = await self._call("deployment_health", op)
        out: dict[str, DeploymentHealth] = {}
        for i, id in enumerate(wanted):
            h, f, u = r[3 * i : 3 * i + 3]
            assert isinstance(h, list) and isinstance(f, list) and isinstance(u, list)
            failures = tuple(
                sorted((float(score), _text(member).split(":", 2)[1]) for member, score in f)
            )
            out[id] = DeploymentHealth(
                in_flight=max(0, int(h[0] or 0)),
                latency=float(h[1]) if h[1] is not None else None,
                minute=minute,
                requests=int(u[0] or 0),
                tokens=int(u[1] or 0),
                failures=failures,
                cooldown_until=float(h[2] or 0.0),
            )
        return out

    async def deployment_began(self, id: str, tokens: int, now: float) -> None:
        tag = deployment_tag(id)
        usage = f"{tag}:u:{int(now // 60)}"

        async def op() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hincrby(f"{tag}:h", "in_flight", 1)
                pipe.expire(f"{tag}:h", HEALTH_TTL)
                pipe.hincrby(usage, "requests", 1)
                pipe.hincrby(usage, "tokens", max(0, tokens))
                pipe.expire(usage, 120)
                await pipe.execute()

        await self._call("deployment_began", op)

    async def deployment_ended(self, id: str, latency: float | None) -> None:
        key = f"{deployment_tag(id)}:h"

        async def op() -> None:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hincrby(key, "in_flight", -1)
                if latency is not None:
                    pipe.hset(key, "latency", repr(float(latency)))
                pipe.expire(key, HEALTH_TTL)
                await pipe.execute()

        await self._call("deployment_ended", op)

    async def deployment_failed(
        self, id: str, kind: str, now: float
    ) -> tuple[tuple[float, str], ...]:
        key = f"{deployment_tag(id)}:f"
        member = f"{now!r}:{kind}:{new_token_id()}"

        async def op() -> list[object]:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zadd(key, {member: now})
                pipe.zremrangebyscore(key, "-inf", f"({now - FAILURE_WINDOW!r}")
                pipe.expire(key, HEALTH_TTL)
                pipe.zrangebyscore(key, now - FAILURE_WINDOW, "+inf", withscores=True)
                result: list[object] = await pipe.execute()
                return result

        found = (await self._call("deployment_failed", op))[-1]
        assert isinstance(found, list)
        return tuple(sorted((float(score), _text(m).split(":", 2)[1]) for m, score in found))

    async def deployment_cool(self, id: str, until: float) -> None:
        key = f"{deployment_tag(id)}:h"

        # a later cooldown stays: read-compare-write would race, so the max is kept in Lua
        await self._call(
            "deployment_cool", lambda: self._cool(keys=[key], args=[repr(float(until)), HEALTH_TTL])
        )

    async def ping(self) -> bool:
        """One attempt, no failover retries: readiness reports the moment, it does not wait."""
        try:
            async with asyncio.timeout(self._deadline):
                if isinstance(self._redis, RedisCluster):
                    # Every node answering is too strict (a failed master is replaced while
                    # the cluster serves); the slot map being known and one node answering
                    # is what routefit needs.
                    return bool(await self._redis.ping(target_nodes=RedisCluster.RANDOM))
                return bool(await self._redis.ping())
        except Exception:
            return False

    async def close(self) -> None:
        await self._close()

    @property
    def client(self) -> Redis | RedisCluster:
        """The underlying client (for tests and operator tooling)."""
        return self._redis
