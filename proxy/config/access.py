"""Who may call, and over what: auth, LiteLLM's ``master_key``, TLS, trusted proxies, the
local simulator's fetching.

**No silent open door.** routefit runs open (every request admitted, no budgets) only when the
config asks for no auth at all: no ``routefit_settings.teams``, no ``routefit_settings.admin_key``,
no ``general_settings.master_key`` (nor, where the file names none, ``LITELLM_MASTER_KEY`` in
the environment, which LiteLLM's proxy takes instead). Any of them *written* in the file — even
as an ``os.environ/NAME`` whose variable is unset — asks for auth, and then a request needs a
key; a key that resolves to nothing simply does not exist (nobody gets in with it) and the
start-up log says so. LiteLLM's other auth settings (custom auth, JWT, IP and route
allow-lists) are refused with an error: loading them with a warning would run the gateway more
open than the file says.

**``general_settings.master_key``** means what it means in LiteLLM: an admin key that every route
also accepts. routefit serves it as one more team (``MASTER_TEAM``: every route, no quotas) and
as an admin key (the dashboard, ``/routefit/calibration``, any team's usage).

**TLS and proxies.** ``tls: {certfile, keyfile}`` serves HTTPS directly; ``trusted_proxies`` lists
the addresses (or networks) whose ``X-Forwarded-For`` / ``X-Forwarded-Proto`` are believed, so the
dashboard's login throttle sees the real client and its cookie is ``Secure`` behind a TLS proxy.
``routefit serve --ssl-certfile/--ssl-keyfile/--forwarded-allow-ips`` override them.

**Hosts.** ``allowed_hosts`` names the ``Host`` values routefit answers besides loopback names and
IP literals (``proxy.origin``: a name re-pointed at this machine by another site's DNS is how a
page reads an open routefit). Unset, only open mode checks the ``Host``; set, every request is
checked, keys or not; ``"*"`` turns the check off.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.config.reader import Reader
from proxy.teams import hash_key

__all__ = ["ACCESS_KEYS", "Access", "read_access"]

#: routefit_settings keys read here (the rest of the block is proxy.config.settings').
ACCESS_KEYS = frozenset({"tls", "trusted_proxies", "simulator", "allowed_hosts"})
_TLS_KEYS = frozenset({"certfile", "keyfile", "keyfile_password"})
_SIM_KEYS = frozenset({"fetch_loopback_images"})
#: general_settings keys routefit reads.
_GENERAL_USED = frozenset({"master_key"})
#: Where LiteLLM's proxy takes its master key from when ``general_settings`` names none.
MASTER_KEY_ENV = "LITELLM_MASTER_KEY"
#: LiteLLM auth settings routefit does not implement: each would admit or restrict callers in a
#: way routefit would silently skip, so a config holding one is refused.
_GENERAL_REFUSED = {
    "custom_auth": "a custom auth function",
    "enable_jwt_auth": "JWT auth",
    "litellm_jwtauth": "JWT auth",
    "allowed_ips": "an IP allow-list",
    "allowed_routes": "a route allow-list",
    "admin_only_routes": "admin-only routes",
    "public_routes": "public routes",
    "litellm_key_header_name": "a custom key header",
    "enable_oauth2_auth": "OAuth2 auth",
    "enable_oauth2_proxy_auth": "OAuth2 proxy auth",
}


@dataclass(frozen=True, slots=True)
class Access:
    #: The file asks for auth (teams, an admin key or a master key written in it): never open.
    auth_required: bool = False
    #: SHA-256 of ``general_settings.master_key`` (None: none, or its variable is unset).
    master_key_hash: bytes | None = field(default=None, repr=False)
    tls_certfile: str | None = None
    tls_keyfile: str | None = None
    tls_keyfile_password: str | None = field(default=None, repr=False)
    #: Peers whose forwarded headers are trusted (addresses or CIDR networks; "*" for any).
    trusted_proxies: tuple[str, ...] = ()
    #: The in-process ``sim://local`` simulator fetches loopback image URLs (default: never).
    sim_fetch_loopback_images: bool = False
    #: ``Host`` names answered besides loopback names and IP literals (lower case; ``*.suffix``
    #: for its subdomains, ``*`` for any host): ``proxy.origin``. Empty: none configured.
    allowed_hosts: tuple[str, ...] = ()


def _given(block: Any, key: str) -> bool:
    """Whether ``key`` is written (non-null) in a raw, unresolved mapping."""
    return isinstance(block, Mapping) and block.get(key) is not None


def _master_key(raw: Any, rd: Reader) -> str | None:
    """``general_settings.master_key`` resolved; refused auth settings are errors, keys routefit
    does not use warn (and are not resolved: their variables are none of routefit's business)."""
    where = "general_settings"
    block = rd.mapping(raw, where)
    for key in block:
        if key in _GENERAL_REFUSED and block[key] not in (None, False):
            raise rd.error(
                f"{where}.{key}",
                f"routefit does not implement LiteLLM's {_GENERAL_REFUSED[key]}; remove it "
                "(routefit_settings.teams gives each team its keys and routes)",
            )
    rd.loose(block, _GENERAL_USED | _GENERAL_REFUSED.keys(), where)
    if block.get("master_key") is None:
        # LiteLLM's proxy: ``general_settings.get("master_key", LITELLM_MASTER_KEY)``. A
        # LiteLLM deployment keyed by its environment alone ran open here, admitting anyone.
        return rd.environ.get(MASTER_KEY_ENV) or None
    master = rd.resolve(block.get("master_key"), f"{where}.master_key")
    return None if master is None else rd.string(str(master), f"{where}.master_key")


def _tls(raw: Any, where: str, rd: Reader) -> tuple[str | None, str | None, str | None]:
    block = rd.strict(raw, _TLS_KEYS, where)
    cert, key = block.get("certfile"), block.get("keyfile")
    if (cert is None) != (key is None):
        raise rd.error(where, "certfile and keyfile go together")
    for name, path in (("certfile", cert), ("keyfile", key)):
        if path is not None and not os.path.isfile(rd.string(path, f"{where}.{name}")):
            raise rd.error(f"{where}.{name}", f"no such file: {path}")
    password = block.get("keyfile_password")
    if password is not None:
        password = rd.string(password, f"{where}.keyfile_password")
    return cert, key, password


def check_proxy_entry(value: str) -> str:
    """A trusted-proxy entry as uvicorn takes it: an address, a network, or ``*``."""
    value = value.strip()
    if value != "*":
        ipaddress.ip_network(value, strict=False)  # ValueError for anything else
    return value


def _proxies(raw: Any, where: str, rd: Reader) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise rd.error(where, "must be a list of addresses or networks (or '*')")
    try:
        return tuple(check_proxy_entry(i) for i in items if i.strip())
    except ValueError as exc:
        raise rd.error(where, str(exc)) from None


#: One DNS label (underscores too: container names have them).
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")


def check_host_entry(value: str) -> str:
    """An ``allowed_hosts`` entry as the check compares it: ``*``, ``*.name`` or a name or IP
    literal, lower case, without a trailing dot. A scheme or a port is refused, not stripped:
    the check is on the name alone, and a written port would read as a restriction it is not."""
    entry = value.strip().lower()
    if entry == "*":
        return entry
    wild = entry.startswith("*.")
    name = (entry[2:] if wild else entry).rstrip(".")
    entry = f"*.{name}" if wild else name
    try:
        ipaddress.ip_address(name.strip("[]"))
        return entry
    except ValueError:
        pass
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        raise ValueError(
            f"{value!r} is not a host name (a name or IP address, '*.name' for its subdomains or "
            "'*' for any; no scheme, no port)"
        )
    return entry


def _hosts(raw: Any, where: str, rd: Reader) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise rd.error(where, "must be a list of host names (or '*')")
    try:
        return tuple(dict.fromkeys(check_host_entry(i) for i in items if i.strip()))
    except ValueError as exc:
        raise rd.error(where, str(exc)) from None


def read_access(settings: Mapping[str, Any], unresolved: Any, general: Any, rd: Reader) -> Access:
    """``settings`` is routefit_settings resolved, ``unresolved`` the same block as written
    (an ``os.environ/NAME`` key still asks for auth when its variable is unset), ``general``
    LiteLLM's ``general_settings`` as written."""
    where = "routefit_settings"
    master = _master_key(general, rd)
    cert, key, password = _tls(settings.get("tls"), f"{where}.tls", rd)
    sim = rd.strict(settings.get("simulator"), _SIM_KEYS, f"{where}.simulator")
    fetch = sim.get("fetch_loopback_images")  # null (an unset variable too): the default
    fetch = (
        False if fetch is None else rd.boolean(fetch, f"{where}.simulator.fetch_loopback_images")
    )
    required = any(
        (
            _given(unresolved, "teams"),
            _given(unresolved, "admin_key"),
            _given(general, "master_key"),
            master is not None,  # LITELLM_MASTER_KEY, when the file names no master key
        )
    )
    return Access(
        auth_required=required,
        master_key_hash=hash_key(master) if master else None,
        tls_certfile=cert,
        tls_keyfile=key,
        tls_keyfile_password=password,
        trusted_proxies=_proxies(settings.get("trusted_proxies"), f"{where}.trusted_proxies", rd),
        sim_fetch_loopback_images=fetch,
        allowed_hosts=_hosts(settings.get("allowed_hosts"), f"{where}.allowed_hosts", rd),
    )
