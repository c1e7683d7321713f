"""The embedded store: stdlib ``sqlite3`` for one process (``routefit serve`` on a bare machine).

Every call runs on one dedicated worker thread (a ``ThreadPoolExecutor(max_workers=1)``): the
event loop never blocks on disk, and all operations are serialized, which makes ``reserve``
atomic within the process. Multi-statement operations also run in ``BEGIN IMMEDIATE``
transactions, so several processes sharing one file stay correct too (SQLite's write lock,
waited for at most ``busy_timeout``).

File databases use WAL with ``synchronous=NORMAL`` (a crash may lose the last transactions,
never corrupt the file); ``":memory:"`` is one private in-memory database.

Budget semantics are those of ``RedisStore`` (see docs/store.md), with ``clock`` (default
``time.time``) in place of the Redis server's clock.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pricing.calibration import Anchor, Sample
from proxy.store.base import (
    FAILURE_WINDOW,
    HEALTH_TTL,
    AnchorWrite,
    BudgetWindow,
    DeploymentHealth,
    Reservation,
    StoreUnavailable,
    WindowState,
    check_request_cap,
    check_response_args,
    check_team_bytes,
    window_bucket,
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

__all__ = ["SqliteStore"]

T = TypeVar("T")

#: A route's samples (a team's request records) are trimmed to their cap once a sixteenth of
#: the cap was written since the last trim, not after every write: finding the cap-th newest
#: row walks ``cap`` index entries (~0.4 ms at 2,000), which at every write was most of the
#: store thread's CPU under load (bench/REPORT.md, 1h). Readers never see the rows past the
#: cap (``recent_samples`` reads at most ``sample_cap``, ``recent_requests`` at most the cap
#: the list was last written with); a file holds at most a sixteenth more per list, and after
#: a restart, until its first trim, what the previous process had not trimmed yet.
_TRIM_EVERY = 16

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY,
    route TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_route ON samples (route, id);
CREATE TABLE IF NOT EXISTS anchors (
    route TEXT NOT NULL,
    key BLOB NOT NULL,
    data TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (route, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS anchors_expiry ON anchors (expires_at);
CREATE TABLE IF NOT EXISTS budget (
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    used INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (team, name, bucket)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS budget_expiry ON budget (expires_at);
CREATE TABLE IF NOT EXISTS settled (
    team TEXT NOT NULL,
    id TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (team, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS responses (
    team TEXT NOT NULL,
    id TEXT NOT NULL,
    data BLOB NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (team, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS responses_expiry ON responses (expires_at);
CREATE INDEX IF NOT EXISTS responses_team_expiry ON responses (team, expires_at);
CREATE TABLE IF NOT EXISTS response_bytes (
    team TEXT PRIMARY KEY,
    used INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    team TEXT NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_team ON requests (team, id);
CREATE TABLE IF NOT EXISTS deployments (
    id TEXT PRIMARY KEY,
    in_flight INTEGER NOT NULL DEFAULT 0,
    latency REAL,
    minute INTEGER NOT NULL DEFAULT -1,
    requests INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    failures TEXT NOT NULL DEFAULT '[]',
    cooldown_until REAL NOT NULL DEFAULT 0,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
"""

_HEALTH_COLUMNS = "id, in_flight, latency, minute, requests, tokens, failures, cooldown_until"
_PURGE_EVERY = 60.0  # seconds between sweeps of expired anchors / buckets / settle markers
_IN_CHUNK = 500  # host parameters per ``IN (...)``


class SqliteStore:
    """The store contract on one SQLite database (file path or ``":memory:"``)."""

    name = "sqlite"
    shared = False

    def __init__(
        self,
        path: str,
        *,
        sample_cap: int = 2000,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 5.0,
    ) -> None:
        if sample_cap < 1:
            raise ValueError("sample_cap must be >= 1")
        self.path = path
        self.sample_cap = sample_cap
        self._clock = clock
        self._busy_timeout = busy_timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="routefit-sqlite")
        self._conn: sqlite3.Connection | None = None  # touched only on the worker thread
        self._closed = False
        self._last_purge = float("-inf")
        #: per list (table, route or team): rows written since its last trim, and its cap
        self._untrimmed: dict[tuple[str, str], int] = {}
        self._caps: dict[tuple[str, str], int] = {}

    # -- plumbing (worker thread) ----------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            memory = self.path == ":memory:"
            if not memory:
                parent = os.path.dirname(os.path.abspath(self.path))
                os.makedirs(parent, exist_ok=True)
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,  # autocommit; transactions are explicit
                check_same_thread=False,
            )
            try:
                if not memory:
                    _wal(conn, self._busy_timeout)
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _tx(self, fn: Callable[[sqlite3.Connection, float], T]) -> T:
        """Run ``fn(conn, now)`` in one write transaction."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            now = self._clock()
            result = fn(db, now)
            if now - self._last_purge >= _PURGE_EVERY:
                self._last_purge = now
                for table in ("anchors", "budget", "settled", "deployments"):
                    db.execute(f"DELETE FROM {table} WHERE expires_at <= ?", (now,))  # noqa: S608
                _sweep_responses(db, now)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return result

    def _due(self, table: str, keys: Sequence[str], cap: int) -> list[str]:
        """Which lists of ``table`` to trim to ``cap`` after ``keys`` (one per row) are written:
        each once a sixteenth of its cap was written since its last trim (``_TRIM_EVERY``).
        Counted on the event loop, the one caller."""
        due: list[str] = []
        for key, n in Counter(keys).items():
            at = (table, key)
            self._caps[at] = cap
            written = self._untrimmed.get(at, 0) + n
            if written >= max(1, cap // _TRIM_EVERY):
                due.append(key)
                written = 0
            self._untrimmed[at] = written
        return due

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise StoreUnavailable("sqlite: store is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args))
        except (sqlite3.Error, OSError) as e:
            raise StoreUnavailable(f"sqlite: {type(e).__name__}: {e}") from e

    # -- calibration -----------------------------------------------------------------------
    async def record_sample(self, sample: Sample) -> None:
        data = encode_sample(sample)
        trim = self._due("samples", [sample.route], self.sample_cap)

        def op(db: sqlite3.Connection, now: float) -> None:
            db.execute("INSERT INTO samples (route, data) VALUES (?, ?)", (sample.route, data))
            _trim(db, "samples", "route", trim, self.sample_cap)

        await self._run(self._tx, op)

    async def record_batch(
        self, samples: Sequence[Sample], anchors: Sequence[AnchorWrite], ttl: float
    ) -> None:
        if ttl <= 0:
            raise ValueError("anchor ttl must be > 0")
        if not samples and not anchors:
            return
        rows = [(sample.route, encode_sample(sample)) for sample in samples]
        trim = self._due("samples", [route for route, _ in rows], self.sample_cap)
        written = [(route, bytes(key), encode_anchor(anchor)) for route, key, anchor in anchors]

        def op(db: sqlite3.Connection, now: float) -> None:
            db.executemany("INSERT INTO samples (route, data) VALUES (?, ?)", rows)
            _trim(db, "samples", "route", trim, self.sample_cap)
            db.executemany(
                "INSERT OR REPLACE INTO anchors (route, key, data, expires_at) VALUES (?, ?, ?, ?)",
                [(route, key, data, now + ttl) for route, key, data in written],
            )

        await self._run(self._tx, op)

    async def recent_samples(self, route: str, limit: int) -> list[Sample]:
        limit = min(limit, self.sample_cap)
        if limit <= 0:
            return []

        def op() -> list[str]:
            rows = self._db().execute(
                "SELECT data FROM samples WHERE route = ? ORDER BY id DESC LIMIT ?",
                (route, limit),
            )
            return [r[0] for r in rows]

        out = []
        for data in reversed(await self._run(op)):
            try:
                out.append(decode_sample(route, data))
            except (ValueError, TypeError):
                continue
        return out

    async def put_anchor(self, route: str, key: bytes, anchor: Anchor, ttl: float) -> None:
        if ttl <= 0:
            raise ValueError("anchor ttl must be > 0")
        data = encode_anchor(anchor)

        def op(db: sqlite3.Connection, now: float) -> None:
            db.execute(
                "INSERT OR REPLACE INTO anchors (route, key, data, expires_at) VALUES (?, ?, ?, ?)",
                (route, bytes(key), data, now + ttl),
            )

        await self._run(self._tx, op)

    async def find_anchor(self, route: str, keys: Sequence[bytes]) -> tuple[int, Anchor] | None:
        if not keys:
            return None
        index: dict[bytes, int] = {}
        for i, k in enumerate(keys):
            index.setdefault(bytes(k), i)
        wanted = list(index)

        def op() -> list[tuple[bytes, str]]:
            db = self._db()
            now = self._clock()
            found: list[tuple[bytes, str]] = []
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start : start + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                found += db.execute(
                    f"SELECT key, data FROM anchors WHERE route = ? AND expires_at > ?"  # noqa: S608
                    f" AND key IN ({marks})",
                    (route, now, *chunk),
                ).fetchall()
            return found

        hits = sorted((index[bytes(k)], data) for k, data in await self._run(op))
        for i, data in hits:
            try:
                return i, decode_anchor(data)
            except (ValueError, TypeError):
                continue
        return None

    # -- budgets ---------------------------------------------------------------------------
    async def reserve(self, team: str, windows: Sequence[tuple[BudgetWindow, int]]) -> Reservation:
        check_amounts(windows)
        pairs = list(windows)

        def op(db: sqlite3.Connection, now: float) -> Reservation:
            admitted = True
            retry_after = 0.0
            rows = []
            for w, amount in pairs:
                bucket, reset = window_bucket(w.kind, now)
                expires_at = round(now + reset) + BUCKET_SLACK[w.kind]
                row = db.execute(
                    "SELECT used FROM budget WHERE team = ? AND name = ? AND bucket = ?",
                    (team, w.name, bucket),
                ).fetchone()
                used = int(row[0]) if row else 0
                if amount > 0 and used + amount > w.limit:
                    if admitted:
                        retry_after = reset
                    admitted = False
                rows.append((w, amount, bucket, reset, expires_at, used))
            states = []
            buckets = []
            for w, amount, bucket, reset, expires_at, used in rows:
                if admitted and amount > 0:
                    db.execute(
                        "INSERT INTO budget (team, name, bucket, used, expires_at)"
                        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (team, name, bucket)"
                        " DO UPDATE SET used = used + excluded.used,"
                        " expires_at = excluded.expires_at",
                        (team, w.name, bucket, amount, expires_at),
                    )
                    used += amount
                states.append(WindowState(w.name, w.limit, used, reset))
                buckets.append(ReservedBucket(w.name, bucket, amount, expires_at))
            if not admitted:
                return Reservation(False, None, tuple(states), retry_after=retry_after)
            return Reservation(True, encode_token(new_token_id(), buckets), tuple(states))

        return await self._run(self._tx, op)

    async def settle(
        self, team: str, token: str, windows: Sequence[tuple[BudgetWindow, int]]
    ) -> None:
        check_amounts(windows)
        token_id, buckets = decode_token(token)
        deltas = settle_deltas(buckets, windows)
        if not deltas:
            return

        def op(db: sqlite3.Connection, now: float) -> None:
            last = max(b.expires_at for b, _ in deltas)
            if last <= now:
                return
            marked = db.execute(
                "INSERT INTO settled (team, id, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (team, id) DO NOTHING",
                (team, token_id, last),
            )
            if marked.rowcount == 0:
                return  # settled before
            for b, delta in deltas:
                if b.expires_at <= now:
                    continue  # the bucket's window (and its slack) is over
                changed = db.execute(
                    "UPDATE budget SET used = max(0, used + ?)"
                    " WHERE team = ? AND name = ? AND bucket = ?",
                    (delta, team, b.name, b.bucket),
                )
                if changed.rowcount == 0 and delta > 0:
                    db.execute(
                        "INSERT INTO budget (team, name, bucket, used, expires_at)"
                        " VALUES (?, ?, ?, ?, ?)",
                        (team, b.name, b.bucket, delta, b.expires_at),
                    )

        await self._run(self._tx, op)

    async def usage(self, team: str, windows: Sequence[BudgetWindow]) -> list[WindowState]:
        for w in windows:
            check_kind(w.kind)
        ws = list(windows)

        def op() -> list[WindowState]:
            db = self._db()
            now = self._clock()
            out = []
            for w in ws:
                bucket, reset = window_bucket(w.kind, now)
                row = db.execute(
                    "SELECT used FROM budget WHERE team = ? AND name = ? AND bucket = ?",
                    (team, w.name, bucket),
                ).fetchone()
                out.append(WindowState(w.name, w.limit, int(row[0]) if row else 0, reset))
            return out

        return await self._run(op)

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
        blob = bytes(data)
        if team_bytes is not None and len(blob) > team_bytes:
            return False  # it could never fit: nothing evicted

        def op(db: sqlite3.Connection, now: float) -> bool:
            used = _team_bytes(db, team, now)
            replaced = db.execute(
                "DELETE FROM responses WHERE team = ? AND id = ? RETURNING length(data)",
                (team, response_id),
            ).fetchone()
            used -= replaced[0] if replaced else 0
            if team_bytes is not None:
                used = _evict(db, team, used, team_bytes - len(blob))
            db.execute(
                "INSERT INTO responses (team, id, data, expires_at) VALUES (?, ?, ?, ?)",
                (team, response_id, blob, now + ttl_seconds),
            )
            _set_team_bytes(db, team, used + len(blob))
            return True

        return await self._run(self._tx, op)

    async def response_bytes(self, team: str) -> int:
        def op(db: sqlite3.Connection, now: float) -> int:
            used = _team_bytes(db, team, now)
            _set_team_bytes(db, team, used)
            return used

        return await self._run(self._tx, op)

    async def get_response(self, team: str, response_id: str) -> bytes | None:
        check_response_args(response_id)

        def op() -> bytes | None:
            row = (
                self._db()
                .execute(
                    "SELECT data FROM responses WHERE team = ? AND id = ? AND expires_at > ?",
                    (team, response_id, self._clock()),
                )
                .fetchone()
            )
            return bytes(row[0]) if row else None

        return await self._run(op)

    async def delete_response(self, team: str, response_id: str) -> bool:
        check_response_args(response_id)

        def op(db: sqlite3.Connection, now: float) -> bool:
            gone = db.execute(
                "DELETE FROM responses WHERE team = ? AND id = ?"
                " RETURNING expires_at, length(data)",
                (team, response_id),
            ).fetchall()
            _release(db, [(team, size) for _, size in gone])
            return any(row[0] > now for row in gone)

        return await self._run(self._tx, op)

    # -- the request log -------------------------------------------------------------------
    async def record_request(self, team: str, data: bytes, cap: int) -> None:
        check_request_cap(cap)
        blob = bytes(data)
        trim = self._due("requests", [team], cap)

        def op(db: sqlite3.Connection, now: float) -> None:
            db.execute("INSERT INTO requests (team, data) VALUES (?, ?)", (team, blob))
            _trim(db, "requests", "team", trim, cap)

        await self._run(self._tx, op)

    async def record_requests(self, items: Sequence[tuple[str, bytes]], cap: int) -> None:
        check_request_cap(cap)
        rows = [(team, bytes(data)) for team, data in items]
        if not rows:
            return
        trim = self._due("requests", [team for team, _ in rows], cap)

        def op(db: sqlite3.Connection, now: float) -> None:
            db.executemany("INSERT INTO requests (team, data) VALUES (?, ?)", rows)
            _trim(db, "requests", "team", trim, cap)

        await self._run(self._tx, op)

    async def recent_requests(self, team: str, limit: int) -> list[bytes]:
        # the cap this process last kept the team's list to: the rows past it not trimmed yet
        # (``_due``) are never read back
        limit = min(limit, self._caps.get(("requests", team), limit))
        if limit <= 0:
            return []

        def op() -> list[bytes]:
            rows = self._db().execute(
                "SELECT data FROM requests WHERE team = ? ORDER BY id DESC LIMIT ?",
                (team, limit),
            )
            return [bytes(r[0]) for r in rows]

        return await self._run(op)

    # -- deployment health -----------------------------------------------------------------
    async def deployment_health(
        self, ids: Sequence[str], now: float
    ) -> dict[str, DeploymentHealth]:
        wanted = list(dict.fromkeys(ids))
        minute = int(now // 60)

        def op() -> dict[str, DeploymentHealth]:
            out: dict[str, DeploymentHealth] = {}
            for i in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[i : i + _IN_CHUNK]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT {_HEALTH_COLUMNS} FROM deployments WHERE id IN ({marks}) AND expires_at > ?"  # noqa: S608, E501
                rows = self._db().execute(query, (*chunk, self._clock()))
                for row in rows:
                    failures = tuple(
                        (float(t), str(k))
                        for t, k in json.loads(row[6])
                        if now - float(t) < FAILURE_WINDOW
                    )
                    current = int(row[3]) == minute  # an older minute's usage counts 0
                    out[row[0]] = DeploymentHealth(
                        int(row[1]),
                        row[2],
                        minute,
                        int(row[4]) if current else 0,
                        int(row[5]) if current else 0,
                        failures,
                        float(row[7]),
                    )
            return out

        return await self._run(op)

    def _upsert(self, db: sqlite3.Connection, id: str, now: float) -> None:
        db.execute(
            "INSERT INTO deployments (id, expires_at) VALUES (?, ?) ON CONFLICT (id)"
            " DO UPDATE SET expires_at = excluded.expires_at",
            (id, now + HEALTH_TTL),
        )

    async def deployment_began(self, id: str, tokens: int, now: float) -> None:
        minute = int(now // 60)

        def op(db: sqlite3.Connection, clock: float) -> None:
            self._upsert(db, id, clock)
            db.execute(
                "UPDATE deployments SET in_flight = in_flight + 1,"
                " requests = CASE WHEN minute = ? THEN requests + 1 ELSE 1 END,"
                " tokens = CASE WHEN minute = ? THEN tokens + ? ELSE ? END, minute = ?"
                " WHERE id = ?",
                (minute, minute, max(0, tokens), max(0, tokens), minute, id),
            )

        await self._run(self._tx, op)

    async def deployment_ended(self, id: str, latency: float | None) -> None:
        def op(db: sqlite3.Connection, clock: float) -> None:
            self._upsert(db, id, clock)
            db.execute(
                "UPDATE deployments SET in_flight = MAX(0, in_flight - 1),"
                " latency = COALESCE(?, latency) WHERE id = ?",
                (latency, id),
            )

        await self._run(self._tx, op)

    async def deployment_failed(
        self, id: str, kind: str, now: float
    ) -> tuple[tuple[float, str], ...]:
        def op(db: sqlite3.Connection, clock: float) -> tuple[tuple[float, str], ...]:
            self._upsert(db, id, clock)
            (raw,) = db.execute("SELECT failures FROM deployments WHERE id = ?", (id,)).fetchone()
            kept = [
                (float(t), str(k)) for t, k in json.loads(raw) if now - float(t) < FAILURE_WINDOW
            ]
            kept.append((now, kind))
            db.execute("UPDATE deployments SET failures = ? WHERE id = ?", (json.dumps(kept), id))
            return tuple(kept)

        return await self._run(self._tx, op)

    async def deployment_cool(self, id: str, until: float) -> None:
        def op(db: sqlite3.Connection, clock: float) -> None:
            self._upsert(db, id, clock)
            db.execute(
                "UPDATE deployments SET cooldown_until = MAX(cooldown_until, ?) WHERE id = ?",
                (until, id),
            )

        await self._run(self._tx, op)

    # -- lifecycle -------------------------------------------------------------------------
    async def ping(self) -> bool:
        try:
            await self._run(lambda: self._db().execute("SELECT 1").fetchone())
        except Exception:
            return False
        return True

    async def close(self) -> None:
        if self._closed:
            return

        def op() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await self._run(op)
        finally:
            self._closed = True
            self._executor.shutdown(wait=False)


def _trim(db: sqlite3.Connection, table: str, column: str, keys: Sequence[str], cap: int) -> None:
    """Keep the newest ``cap`` rows of each of ``keys``' lists in ``table`` (by ``column``)."""
    for key in keys:
        db.execute(
            f"DELETE FROM {table} WHERE {column} = ? AND id <= (SELECT id FROM {table}"  # noqa: S608
            f" WHERE {column} = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (key, key, cap),
        )


# -- a team's stored bytes: ``response_bytes.used`` is the sum of its rows' lengths in
# ``responses`` (expired rows included until deleted): every delete releases, every insert adds.


def _team_bytes(db: sqlite3.Connection, team: str, now: float) -> int:
    """The team's stored bytes with its expired records deleted and released. A team without
    a total yet (a file written before the bound existed) is summed once from its rows."""
    row = db.execute("SELECT used FROM response_bytes WHERE team = ?", (team,)).fetchone()
    if row is None:
        row = db.execute(
            "SELECT COALESCE(SUM(length(data)), 0) FROM responses WHERE team = ?", (team,)
        ).fetchone()
    gone = db.execute(
        "DELETE FROM responses WHERE team = ? AND expires_at <= ? RETURNING length(data)",
        (team, now),
    ).fetchall()
    return int(row[0]) - sum(int(size) for (size,) in gone)


def _evict(db: sqlite3.Connection, team: str, used: int, room: int) -> int:
    """Delete the team's records nearest their expiry (its oldest) until at most ``room`` bytes
    are stored; the bytes left. A total with no rows behind it reads 0."""
    while used > room:
        oldest = db.execute(
            "SELECT id, length(data) FROM responses WHERE team = ? ORDER BY expires_at, id LIMIT 1",
            (team,),
        ).fetchone()
        if oldest is None:
            return 0
        db.execute("DELETE FROM responses WHERE team = ? AND id = ?", (team, oldest[0]))
        used -= oldest[1]
    return used


def _set_team_bytes(db: sqlite3.Connection, team: str, used: int) -> None:
    """Write the team's total (a team with nothing stored keeps no row)."""
    if used <= 0:
        db.execute("DELETE FROM response_bytes WHERE team = ?", (team,))
        return
    db.execute(
        "INSERT INTO response_bytes (team, used) VALUES (?, ?)"
        " ON CONFLICT (team) DO UPDATE SET used = excluded.used",
        (team, used),
    )


def _release(db: sqlite3.Connection, gone: Sequence[tuple[str, int]]) -> None:
    """Subtract deleted records' sizes from their teams' totals (a team without a total is
    summed from its rows when next asked: nothing to subtract from)."""
    by_team: Counter[str] = Counter()
    for team, size in gone:
        by_team[team] += size
    db.executemany(
        "UPDATE response_bytes SET used = max(0, used - ?) WHERE team = ?",
        [(size, team) for team, size in by_team.items()],
    )


def _sweep_responses(db: sqlite3.Connection, now: float) -> None:
    """Delete every team's expired records, releasing their bytes."""
    gone = db.execute(
        "DELETE FROM responses WHERE expires_at <= ? RETURNING team, length(data)", (now,)
    ).fetchall()
    _release(db, [(team, size) for team, size in gone])


def _wal(conn: sqlite3.Connection, patience: float) -> None:
    """The file in WAL mode. Switching a file to it needs the file to itself, and SQLite does
    not wait for that (no busy handler: "database is locked" at once), so replicas opening a new
    file together (``--workers N``, the first request of each) could fail their first store
    call; the switch is retried for up to ``patience`` seconds, and a file already in WAL mode
    (every later open) is only read."""
    deadline = time.monotonic() + patience
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)
