"""Teams: who may call which routes, within which quotas — and how a key becomes a team.

Teams are read from config by ``proxy.config.teams``; this module is what they do at run time.

Keys are never kept in memory in the clear: config gives plain keys (usually
``os.environ/NAME``) or their SHA-256 hashes (``sha256:<hex>``); routefit keeps only hashes, and a
presented key is hashed and compared against every known hash in constant time, without an early
exit, so response timing says nothing about which key or how much of it matched. Only a short
fingerprint (the first 8 hex digits of the hash) ever appears in logs or errors. A presented
key is any string (non-ASCII, empty, megabytes long): it is hashed as UTF-8 and only fixed-length
digests are compared, so no input raises and none takes a different path.

Open mode (every request admitted, no budgets) is for a config that asks for no auth at all; a
config that names teams, an admin key or LiteLLM's ``master_key`` is never open, even when
every key it names resolves to nothing (then nobody gets in). The master key is one more team,
``MASTER_TEAM``: every route, no quotas — and an admin key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from proxy.errors import ProxyError
from proxy.store import BudgetWindow
from proxy.throttle import LoginThrottle
from strategies.policy import FitPolicy

__all__ = [
    "BEARER_OR_API_KEY",
    "MASTER_TEAM",
    "RESERVED_TEAMS",
    "KeyPlaces",
    "Quotas",
    "Team",
    "TeamDirectory",
    "fingerprint",
    "hash_key",
    "presented_key",
]


#: The team id of LiteLLM's ``general_settings.master_key`` (reserved: no configured team has it).
MASTER_TEAM = "master-key"
#: Team ids no configured team may take: the master key's, and the store namespaces of dashboard
#: sessions (``proxy.ui.auth``) and of an open gateway (``proxy.responses_store.OPEN_TEAM``,
#: ``proxy.records.ANONYMOUS``: a team of that id would read what keyless clients left there).
RESERVED_TEAMS = {
    MASTER_TEAM: "general_settings.master_key's team",
    "routefit-ui-sessions": "dashboard sessions",
    "-": "an open gateway's stored responses and request log",
}
#: Compared against when a hash is absent, so the work per key does not say which keys exist.
_NO_KEY = bytes(32)


def hash_key(key: str) -> bytes:
    # surrogatepass: a str from a JSON body may hold lone surrogates; never raise on a key
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def fingerprint(key_hash: bytes) -> str:
    return key_hash.hex()[:8]


@dataclass(frozen=True, slots=True)
class Quotas:
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    usd_per_month: float | None = None
    max_prompt_tokens: int | None = None

    def windows(self) -> list[BudgetWindow]:
        out = []
        if self.tokens_per_minute is not None:
            out.append(BudgetWindow("tokens_per_minute", "minute", self.tokens_per_minute))
        if self.tokens_per_day is not None:
            out.append(BudgetWindow("tokens_per_day", "day", self.tokens_per_day))
        if self.usd_per_month is not None:
            out.append(BudgetWindow("usd_per_month", "month", round(self.usd_per_month * 1e6)))
        return out


@dataclass(frozen=True, slots=True)
class Team:
    id: str
    key_hashes: tuple[bytes, ...] = field(repr=False)
    routes: frozenset[str] | None  # None: every route
    quotas: Quotas
    #: FitPolicy overrides for this team as written in config (kept until every caller uses
    #: ``policy_overrides``).
    fit: Mapping[str, Any] = field(default_factory=dict)
    #: The same overrides, validated and normalised once at load (``FitPolicy.merged`` input).
    policy_overrides: Mapping[str, Any] = field(default_factory=dict)

    def may_use(self, alias: str) -> bool:
        return self.routes is None or alias in self.routes

    def fit_policy(self, base: FitPolicy) -> FitPolicy:
        """A route's policy with this team's overrides and its per-request prompt quota."""
        policy = base.merged(self.policy_overrides)
        cap = self.quotas.max_prompt_tokens
        if cap is None:
            return policy
        current = policy.max_prompt_tokens
        return replace(policy, max_prompt_tokens=cap if current is None else min(cap, current))


class TeamDirectory:
    """Key → team, in constant time per known key."""

    def __init__(
        self,
        teams: Sequence[Team],
        admin_hash: bytes | None,
        master_hash: bytes | None = None,
        auth_required: bool | None = None,
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.teams = {t.id: t for t in teams}
        self.master = (
            Team(MASTER_TEAM, (master_hash,), None, Quotas()) if master_hash is not None else None
        )
        members = [*teams, self.master] if self.master is not None else list(teams)
        self._keys = [(h, t) for t in members for h in t.key_hashes]
        self._admin = admin_hash
        self._master = master_hash
        if auth_required is None:
            auth_required = bool(teams) or admin_hash is not None or master_hash is not None
        self._required = auth_required
        #: Failed admin-key attempts per client, on every admin door (``proxy.throttle``).
        self.admin_throttle = throttle if throttle is not None else LoginThrottle()

    @property
    def open(self) -> bool:
        """No auth asked for: every request is admitted (local use)."""
        return not self._required

    def team_for(self, key: str) -> Team | None:
        presented = hash_key(key)
        found: Team | None = None
        for known, team in self._keys:  # no early exit: every hash is compared
            if hmac.compare_digest(presented, known):
                found = team
        return found

    def is_admin(self, key: str) -> bool:
        """The admin key or the master key (both compared, whichever is set)."""
        presented = hash_key(key)
        admin = hmac.compare_digest(presented, self._admin or _NO_KEY) and self._admin is not None
        master = hmac.compare_digest(presented, self._master or _NO_KEY)
        return admin or (master and self._master is not None)

    def authenticate(
        self,
        headers: Mapping[str, str],
        query: Mapping[str, str] | None = None,
        places: KeyPlaces | None = None,
    ) -> Team | None:
        """The team a request belongs to (None in open mode); 401 for a missing or wrong key.
        ``places``: where the request's wire presents keys (OpenAI's and Anthropic's by
        default)."""
        if self.open:
            return None
        places = places or BEARER_OR_API_KEY
        key = places.key(headers, query)
        if not key:
            raise ProxyError(401, f"missing API key: {places.hint}", code="invalid_api_key")
        team = self.team_for(key)
        if team is None:
            raise ProxyError(
                401,
                f"invalid API key (fingerprint {fingerprint(hash_key(key))})",
                code="invalid_api_key",
            )
        return team

    def check_admin_key(self, key: str, client: str | None) -> None:
        """The admin (or master) key, else 403; throttled per ``client`` (429 while it is
        locked out, without looking at the key). ``client`` None: an unthrottled caller."""
        if client is not None:
            self.admin_throttle.check(client)
        if not self.is_admin(key):
            if client is not None:
                self.admin_throttle.failed(client)
            raise ProxyError(403, "this endpoint needs the admin key", code="admin_key_required")
        if client is not None:
            self.admin_throttle.succeeded(client)

    def authorize_admin(self, headers: Mapping[str, str], client: str | None = None) -> None:
        """Admin endpoints: the admin (or master) key; open only when routefit runs open."""
        if self.open:
            return
        key = presented_key(headers)
        if not key:
            raise ProxyError(401, "this endpoint needs the admin key", code="admin_key_required")
        self.check_admin_key(key, client)

    @property
    def has_keys(self) -> bool:
        """Whether any key at all (a team's, the admin's, the master's) could get in."""
        return bool(self._keys) or self._admin is not None

    @property
    def has_admin(self) -> bool:
        """Whether any admin key (admin or master) exists to sign in with."""
        return self._admin is not None or self._master is not None

    def usage_reader(
        self, headers: Mapping[str, str], team_id: str, client: str | None = None
    ) -> Team:
        """The team whose usage the caller may read: any with the admin key, else its own.
        A key that is neither counts as a failed admin-key attempt of ``client``."""
        if self.open:
            raise ProxyError(404, "no teams are configured", code="not_found")
        key = presented_key(headers)
        if client is not None and key:
            self.admin_throttle.check(client)
        try:
            self.authorize_admin(headers)
        except ProxyError:
            try:
                caller = self.authenticate(headers)
            except ProxyError:
                if client is not None and key:
                    self.admin_throttle.failed(client)
                raise
            if caller is None or caller.id != team_id:
                raise ProxyError(
                    403, "a team key can only read its own usage", code="forbidden"
                ) from None
        team = self.teams.get(team_id)
        if team is None:
            raise ProxyError(404, f"unknown team {team_id!r}", code="not_found")
        return team


@dataclass(frozen=True, slots=True)
class KeyPlaces:
    """Where a wire's clients present their key, declared once per wire (``Wire.keys``):
    ``Authorization: Bearer <key>`` always; else the first of ``headers`` that is set; else the
    query parameter ``query`` (Google's ``?key=``), for the wires whose SDKs send it there."""

    headers: tuple[str, ...] = ("x-api-key",)
    query: str | None = None

    def key(self, headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> str | None:
        """The presented key; None when there is none (a non-Bearer ``Authorization`` is none:
        the client meant another scheme, and no other header stands in for it)."""
        auth = headers.get("authorization")
        if auth:
            scheme, _, value = auth.partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                return value.strip()
            return None
        for name in self.headers:
            key = headers.get(name)
            if key:
                return key.strip()
        found = query.get(self.query) if query is not None and self.query else None
        return found.strip() if found else None

    @property
    def hint(self) -> str:
        """How to send a key, for the 401 that says it is missing (a wire whose SDKs use their
        own header or a query parameter, Google's, names those too)."""
        if self.query is None:
            return "send 'Authorization: Bearer <key>'"
        headers = "".join(f"an '{h}' header, " for h in self.headers)
        return f"send {headers}'?{self.query}=<key>' or 'Authorization: Bearer <key>'"


#: OpenAI's and Anthropic's SDKs: ``Authorization: Bearer`` or ``x-api-key``.
BEARER_OR_API_KEY = KeyPlaces()


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a client sent: ``Authorization: Bearer <key>`` (OpenAI SDK) or ``x-api-key``."""
    return BEARER_OR_API_KEY.key(headers)
