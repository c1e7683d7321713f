"""``routefit_settings.teams``: each team's keys (hashed at once), routes, quotas, fit overrides.

Read once, after the routes (a team may only name configured aliases). Plain keys are hashed
here and never kept; ``sha256:<hex>`` entries are taken as hashes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.config.policy import read_overrides
from proxy.config.reader import Reader, scalar
from proxy.teams import RESERVED_TEAMS, Quotas, Team, hash_key

__all__ = ["TEAM_KEYS", "read_teams"]

#: ``router_settings`` is read by the loader (``proxy.config.router_settings``), after the global
#: block it overrides.
TEAM_KEYS = frozenset({"id", "keys", "routes", "quotas", "fit", "router_settings"})
_QUOTA_KEYS = frozenset(Quotas.__dataclass_fields__)


def _key_hash(value: Any, where: str, rd: Reader) -> bytes:
    value = rd.string(value, where)
    if not value.startswith("sha256:"):
        return hash_key(value)
    try:
        digest = bytes.fromhex(value[7:])
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise rd.error(where, "sha256: must be followed by 64 hex digits")
    return digest


def _key_hashes(raw: Any, where: str, seen: set[bytes], rd: Reader) -> tuple[bytes, ...]:
    if not isinstance(raw, list) or not raw:
        raise rd.error(where, "must be a non-empty list of keys or sha256: hashes")
    hashes = []
    for j, key in enumerate(raw):
        if key is None:  # an unset os.environ/NAME: that key simply does not exist
            continue
        digest = _key_hash(key, f"{where}[{j}]", rd)
        if digest in seen:
            raise rd.error(f"{where}[{j}]", "the same key is given to two teams")
        seen.add(digest)
        hashes.append(digest)
    return tuple(hashes)


def _routes(raw: Any, aliases: Sequence[str], where: str, rd: Reader) -> frozenset[str] | None:
    if raw is None and where in rd.unset:  # left out, it would mean every route
        raise rd.error(
            where,
            f"os.environ/{rd.unset[where]} is unset: a team's routes are never widened to every "
            "route by a missing variable (leave routes out for every route)",
        )
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
        raise rd.error(where, "must be a list of model aliases")
    if not raw:  # a team whose every request is a 403: a mistake, never a way to say "all"
        raise rd.error(
            where, "is empty: the team could reach no route (leave routes out for every route)"
        )
    missing = [r for r in raw if r not in aliases]
    if missing:
        raise rd.error(where, f"unknown model alias(es) {missing} (configured: {list(aliases)})")
    return frozenset(raw)


def _quotas(raw: Any, where: str, rd: Reader) -> Quotas:
    values: dict[str, Any] = {}
    for key, written in rd.strict(raw, _QUOTA_KEYS, where).items():
        value = scalar(written)  # an os.environ/NAME value is text
        if value is None:
            continue
        if key == "usd_per_month":  # finite: ``.nan``/``.inf`` passed ``<= 0``; round() raises
            rd.number(value, f"{where}.{key}")
            values[key] = value  # as written: ``routefit check`` prints 10, not 10.0
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise rd.error(f"{where}.{key}", "must be a positive integer")
        values[key] = value
    return Quotas(**values)


def _team(
    item: Any, aliases: Sequence[str], where: str, ids: set[str], keys: set[bytes], rd: Reader
) -> Team:
    if not isinstance(item, Mapping):
        raise rd.error(where, "must be a mapping")
    block = rd.strict(item, TEAM_KEYS, where)
    team_id = block.get("id")
    if not isinstance(team_id, str) or not team_id or team_id in ids:
        raise rd.error(f"{where}.id", "must be a unique non-empty string")
    if team_id in RESERVED_TEAMS:
        raise rd.error(f"{where}.id", f"{team_id!r} is reserved ({RESERVED_TEAMS[team_id]})")
    ids.add(team_id)
    fit = rd.mapping(block.get("fit"), f"{where}.fit")
    return Team(
        id=team_id,
        key_hashes=_key_hashes(block.get("keys"), f"{where}.keys", keys, rd),
        routes=_routes(block.get("routes"), aliases, f"{where}.routes", rd),
        quotas=_quotas(block.get("quotas"), f"{where}.quotas", rd),
        fit=dict(fit),
        policy_overrides=read_overrides(fit, f"{where}.fit", rd),
    )


def read_teams(raw: Any, aliases: Sequence[str], rd: Reader) -> tuple[Team, ...]:
    """``raw`` is ``routefit_settings.teams`` with environment references resolved."""
    where = "routefit_settings.teams"
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise rd.error(where, "must be a list")
    ids: set[str] = set()
    keys: set[bytes] = set()
    return tuple(_team(item, aliases, f"{where}[{i}]", ids, keys, rd) for i, item in enumerate(raw))
