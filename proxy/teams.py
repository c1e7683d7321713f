"""Teams: who may call which routes, within which quotas — and how a key becomes a team.

Keys are never kept in memory in the clear: config gives plain keys (usually
``os.environ/NAME``) or their SHA-256 hashes (``sha256:<hex>``); routefit keeps only hashes, and a
presented key is hashed and compared against every known hash in constant time, without an early
exit, so response timing says nothing about which key or how much of it matched. Only a short
fingerprint (the first 8 hex digits of the hash) ever appears in logs or errors.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.errors import ProxyError
from proxy.store import BudgetWindow

__all__ = [
    "Quotas",
    "Team",
    "TeamDirectory",
    "fingerprint",
    "hash_key",
    "parse_teams",
    "presented_key",
]


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


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
    #: FitPolicy overrides for this team (validated at load time).
    fit: Mapping[str, Any] = field(default_factory=dict)

    def may_use(self, alias: str) -> bool:
        return self.routes is None or alias in self.routes


class TeamDirectory:
    """Key → team, in constant time per known key."""

    def __init__(self, teams: Sequence[Team], admin_hash: bytes | None) -> None:
        self.teams = {t.id: t for t in teams}
        self._keys = [(h, t) for t in teams for h in t.key_hashes]
        self._admin = admin_hash

    @property
    def open(self) -> bool:
        """No teams configured: every request is admitted (local use)."""
        return not self.teams

    def team_for(self, key: str) -> Team | None:
        presented = hash_key(key)
        found: Team | None = None
        for known, team in self._keys:  # no early exit: every hash is compared
            if hmac.compare_digest(presented, known):
                found = team
        return found

    def is_admin(self, key: str) -> bool:
        if self._admin is None:
            return False
        return hmac.compare_digest(hash_key(key), self._admin)

    def authenticate(self, headers: Mapping[str, str]) -> Team | None:
        """The team a request belongs to (None in open mode); 401 for a missing or wrong key."""
        if self.open:
            return None
        key = presented_key(headers)
        if not key:
            raise ProxyError(
                401, "missing API key: send 'Authorization: Bearer <key>'", code="invalid_api_key"
            )
        team = self.team_for(key)
        if team is None:
            raise ProxyError(
                401,
                f"invalid API key (fingerprint {fingerprint(hash_key(key))})",
                code="invalid_api_key",
            )
        return team

    def authorize_admin(self, headers: Mapping[str, str]) -> None:
        """Admin endpoints: the admin key; with no teams and no admin key, routefit runs open."""
        if self.open and self._admin is None:
            return
        key = presented_key(headers)
        if not key or not self.is_admin(key):
            raise ProxyError(
                401 if not key else 403,
                "this endpoint needs the admin key",
                code="admin_key_required",
            )

    def usage_reader(self, headers: Mapping[str, str], team_id: str) -> Team:
        """The team whose usage the caller may read: any with the admin key, else its own."""
        if self.open:
            raise ProxyError(404, "no teams are configured", code="not_found")
        try:
            self.authorize_admin(headers)
        except ProxyError:
            caller = self.authenticate(headers)
            if caller is None or caller.id != team_id:
                raise ProxyError(
                    403, "a team key can only read its own usage", code="forbidden"
                ) from None
        team = self.teams.get(team_id)
        if team is None:
            raise ProxyError(404, f"unknown team {team_id!r}", code="not_found")
        return team


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a client sent: ``Authorization: Bearer <key>`` (OpenAI SDK) or ``x-api-key``."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
        return None
    key = headers.get("x-api-key")
    return key.strip() if key else None


def _key_hash(value: Any, where: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: must be a non-empty string")
    if value.startswith("sha256:"):
        try:
            digest = bytes.fromhex(value[7:])
        except ValueError:
            raise ValueError(f"{where}: sha256: must be followed by 64 hex digits") from None
        if len(digest) != 32:
            raise ValueError(f"{where}: sha256: must be followed by 64 hex digits")
        return digest
    return hash_key(value)


def _positive(value: Any, where: str, integer: bool = True) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or value <= 0:
        raise ValueError(f"{where}: must be a positive {'integer' if integer else 'number'}")
    return value


def parse_teams(raw: Any, routes: Sequence[str]) -> list[Team]:
    """Validate ``routefit_settings.teams``; raise ValueError naming the key path."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError("teams: must be a list")
    teams: list[Team] = []
    seen_ids: set[str] = set()
    seen_keys: set[bytes] = set()
    for i, item in enumerate(raw):
        where = f"teams[{i}]"
        if not isinstance(item, Mapping):
            raise ValueError(f"{where}: must be a mapping")
        unknown = set(item) - {"id", "keys", "routes", "quotas", "fit"}
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}")
        team_id = item.get("id")
        if not isinstance(team_id, str) or not team_id or team_id in seen_ids:
            raise ValueError(f"{where}.id: must be a unique non-empty string")
        seen_ids.add(team_id)
        keys = item.get("keys")
        if not isinstance(keys, list) or not keys:
            raise ValueError(f"{where}.keys: must be a non-empty list of keys or sha256: hashes")
        hashes = []
        for j, key in enumerate(keys):
            if key is None:  # an unset os.environ/NAME: that key simply does not exist
                continue
            digest = _key_hash(key, f"{where}.keys[{j}]")
            if digest in seen_keys:
                raise ValueError(f"{where}.keys[{j}]: the same key is given to two teams")
            seen_keys.add(digest)
            hashes.append(digest)
        allowed = item.get("routes")
        if allowed is not None:
            if not isinstance(allowed, list) or not all(isinstance(r, str) for r in allowed):
                raise ValueError(f"{where}.routes: must be a list of model aliases")
            missing = [r for r in allowed if r not in routes]
            if missing:
                raise ValueError(f"{where}.routes: unknown model alias(es) {missing}")
        quotas_raw = item.get("quotas") or {}
        if not isinstance(quotas_raw, Mapping):
            raise ValueError(f"{where}.quotas: must be a mapping")
        unknown = set(quotas_raw) - set(Quotas.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"{where}.quotas: unknown quota(s) {sorted(unknown)} "
                f"(known: {sorted(Quotas.__dataclass_fields__)})"
            )
        quotas = Quotas(
            **{
                k: _positive(v, f"{where}.quotas.{k}", integer=(k != "usd_per_month"))
                for k, v in quotas_raw.items()
                if v is not None
            }
        )
        fit = item.get("fit") or {}
        if not isinstance(fit, Mapping):
            raise ValueError(f"{where}.fit: must be a mapping of fit policy keys")
        teams.append(
            Team(
                id=team_id,
                key_hashes=tuple(hashes),
                routes=frozenset(allowed) if allowed is not None else None,
                quotas=quotas,
                fit=dict(fit),
            )
        )
    return teams
