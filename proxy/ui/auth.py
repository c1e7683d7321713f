"""Who may read the dashboard: the admin key, as a header or as a server-side session.

A browser cannot put the admin key in an ``Authorization`` header when it navigates, and a key
in the URL ends up in history, proxies' logs and Referer headers. So the page itself is a static
shell with no data in it; its data endpoint takes the admin key as a bearer header (curl,
scripts) or a session cookie that the page obtains once by POSTing the key.

**Sessions live in the store**, not in the cookie: the cookie is 256 random bits; the store keeps,
under the SHA-256 of that value, which admin key opened it, for ``SESSION_SECONDS``. So logout
revokes the session everywhere (a copied cookie dies with it), every replica sharing the store
honours it, changing the admin key ends every session it opened, and the store never holds a
value that would itself open a session. The store's stored-response slot holds them (its
contract: bytes under an id, with a TTL, per namespace), in the namespace ``SESSION_NAMESPACE``
that no configured team may take. With the embedded store a session lives in its file (every
worker sharing it sees it; ``:memory:`` keeps it per process).

**No input raises.** A cookie or key may be anything a client can send (non-ASCII, empty,
megabytes): a cookie that is not of the token's form is refused before any look-up; keys are
hashed and compared as fixed-length digests with ``hmac.compare_digest``.

The cookie is ``HttpOnly`` (scripts cannot read it), ``SameSite=Strict`` (no cross-site request
carries it), scoped to ``/routefit/ui``, and ``Secure`` when the request came over TLS (directly,
or through a trusted proxy's ``X-Forwarded-Proto: https``). Admin-key guesses are throttled per
client, on this door and every other admin one (``proxy.throttle``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping

import orjson

from proxy.errors import ProxyError
from proxy.store import Store, StoreUnavailable
from proxy.teams import RESERVED_TEAMS, TeamDirectory, hash_key, presented_key

__all__ = ["COOKIE", "SESSION_NAMESPACE", "SESSION_SECONDS", "Sessions"]

COOKIE = "routefit_ui"
SESSION_SECONDS = 12 * 3600
#: The store namespace (a team slot) of dashboard sessions; no configured team may use it.
SESSION_NAMESPACE = "routefit-ui-sessions"
assert SESSION_NAMESPACE in RESERVED_TEAMS
#: A session token: 32 random bytes, URL-safe base64 without padding.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


def _session_id(token: str) -> str:
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def _binding(admin_hash: bytes) -> bytes:
    """What a session records of the key that opened it (not the key, nor its plain hash)."""
    return hmac.new(admin_hash, b"routefit-ui-session", hashlib.sha256).digest()


class Sessions:
    def __init__(
        self,
        teams: TeamDirectory,
        admin_hashes: tuple[bytes, ...],
        store: Store,
    ) -> None:
        self.teams = teams
        self.bindings = tuple(_binding(h) for h in admin_hashes)
        self.store = store

    @property
    def open(self) -> bool:
        """routefit runs open (no auth configured, local use), and so does the page."""
        return self.teams.open

    async def valid(self, token: str | None, now: float | None = None) -> bool:
        """Whether ``token`` names a live session opened by a current admin key."""
        if not token or not self.bindings or not _TOKEN.fullmatch(token):
            return False
        try:
            raw = await self.store.get_response(SESSION_NAMESPACE, _session_id(token))
        except StoreUnavailable:
            raise ProxyError(
                503,
                "the session store is unavailable; send the admin key as a bearer header",
                code="store_unavailable",
            ) from None
        if raw is None:
            return False
        try:
            record = orjson.loads(raw)
            bound = bytes.fromhex(record["binding"])
            expires = float(record["expires"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return False
        known = False
        for binding in self.bindings:  # no early exit
            known |= hmac.compare_digest(bound, binding)
        return known and expires > (time.time() if now is None else now)

    async def authorize(
        self, headers: Mapping[str, str], cookies: Mapping[str, str], client: str
    ) -> None:
        """Raise 401/403 (429 while ``client`` is locked out) unless the request carries the
        admin key or a valid session."""
        if self.open:
            return
        key = presented_key(headers)
        if key:
            self.teams.check_admin_key(key, client)
            return
        if await self.valid(cookies.get(COOKIE)):
            return
        if not self.teams.has_admin:
            raise ProxyError(
                403,
                "the dashboard needs routefit_settings.admin_key (or a master key) to be set",
                code="admin_key_required",
            )
        raise ProxyError(401, "the dashboard needs the admin key", code="admin_key_required")

    async def login(self, key: str, client: str) -> str:
        """A new session for the admin key; 403 for any other key, 429 while locked out."""
        self.teams.check_admin_key(key, client)
        token = secrets.token_urlsafe(32)
        binding = _binding(hash_key(key))
        record = {"binding": binding.hex(), "expires": time.time() + SESSION_SECONDS}
        try:
            await self.store.put_response(
                SESSION_NAMESPACE, _session_id(token), orjson.dumps(record), SESSION_SECONDS
            )
        except StoreUnavailable:
            raise ProxyError(
                503, "the session store is unavailable; try again", code="store_unavailable"
            ) from None
        return token

    async def logout(self, token: str | None) -> None:
        """Revoke the session (wherever its cookie was copied to); unknown tokens are no-ops."""
        if token and _TOKEN.fullmatch(token):
            try:
                await self.store.delete_response(SESSION_NAMESPACE, _session_id(token))
            except StoreUnavailable:
                raise ProxyError(
                    503, "the session store is unavailable; try again", code="store_unavailable"
                ) from None
