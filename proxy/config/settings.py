"""``routefit_settings:``: the store, limits, admin key, budget failure mode, calibration.

Teams sit in the same block but are read by ``proxy.config.teams`` once the routes are known.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pricing.calibration import CalibrationPolicy
from proxy.config.access import ACCESS_KEYS, Access
from proxy.config.reader import Reader, scalar
from proxy.store.settings import (
    STORE_KEYS,
    StoreSettings,
    StoreSettingsError,
    parse_store_settings,
)
from proxy.teams import hash_key

__all__ = [
    "REQUEST_LOG_KEYS",
    "SETTINGS_KEYS",
    "RequestLogSettings",
    "Settings",
    "TrustLimits",
    "read_settings",
    "store_file",
]

SETTINGS_KEYS = (
    frozenset(STORE_KEYS)
    | frozenset(
        {
            "max_body_bytes",
            "upstream_timeout",
            "teams",
            "admin_key",
            "metrics_key",
            "budget_failure_mode",
            "calibration",
            "upstream_retries",
            "responses_ttl_seconds",
            "responses_store_bytes_per_team",
            "exact_prompt_headers",
        }
    )
    | ACCESS_KEYS
)  # auth, TLS, trusted proxies, the local simulator (proxy.config.access)
# -- provider bounds and CPU fairness (``_trust``) -------------------------------------------
_TRUST_KEYS = frozenset(
    {
        "max_provider_body_bytes",
        "max_sse_event_bytes",
        "count_requests_per_minute",
        "pricing_threads_per_team",
        "body_bytes_in_flight_per_team",
    }
)
SETTINGS_KEYS = SETTINGS_KEYS | _TRUST_KEYS | {"request_log"}
#: ``routefit_settings.request_log`` (``proxy.records``).
REQUEST_LOG_KEYS = frozenset({"contents", "keep"})
#: Records kept per team in the store (the newest).
_REQUEST_LOG_KEEP = 1000
#: A whole (non-streamed) provider answer: far above any real completion, far below memory.
_MAX_PROVIDER_BODY = 64 * 1024 * 1024
#: One SSE event of a provider's stream (``proxy.exchange.sse``).
_MAX_SSE_EVENT = 16 * 1024 * 1024
#: Count and dry-run requests a team may make per minute (a burst of as many).
_COUNT_RATE = 600
#: Threads one team may hold at once pricing big bodies off the event loop.
_PRICING_THREADS = 2
#: Bytes of request bodies (decoded) one team may hold in memory at once (``proxy.fairness``):
#: room for 128 agents' 2 MB requests in flight at once, a few teams' worth of one worker's RAM.
_BODY_BYTES_IN_FLIGHT = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TrustLimits:
    """What a provider may send back and what one team may ask routefit to count."""

    max_provider_body_bytes: int = _MAX_PROVIDER_BODY
    max_sse_event_bytes: int = _MAX_SSE_EVENT
    count_requests_per_minute: int = _COUNT_RATE
    pricing_threads_per_team: int = _PRICING_THREADS
    body_bytes_in_flight_per_team: int = _BODY_BYTES_IN_FLIGHT


def _trust(raw: Mapping[str, Any], where: str, rd: Reader) -> TrustLimits:
    return TrustLimits(
        max_provider_body_bytes=rd.integer(
            raw.get("max_provider_body_bytes", _MAX_PROVIDER_BODY),
            f"{where}.max_provider_body_bytes",
            1024,
        ),
        max_sse_event_bytes=rd.integer(
            raw.get("max_sse_event_bytes", _MAX_SSE_EVENT), f"{where}.max_sse_event_bytes", 1024
        ),
        count_requests_per_minute=rd.integer(
            raw.get("count_requests_per_minute", _COUNT_RATE),
            f"{where}.count_requests_per_minute",
            1,
        ),
        pricing_threads_per_team=rd.integer(
            raw.get("pricing_threads_per_team", _PRICING_THREADS),
            f"{where}.pricing_threads_per_team",
            1,
        ),
        body_bytes_in_flight_per_team=rd.integer(
            raw.get("body_bytes_in_flight_per_team", _BODY_BYTES_IN_FLIGHT),
            f"{where}.body_bytes_in_flight_per_team",
            1024,
        ),
    )


@dataclass(frozen=True, slots=True)
class RequestLogSettings:
    """The request log (``proxy.records``): a line per request and a bounded record per team."""

    #: Prompt contents in the log line (redacted); never in the store. Off: the log is safe to
    #: ship anywhere a team's prompts may not go.
    contents: bool = False
    #: Records kept per team in the store (the newest): bounded whatever the traffic.
    keep: int = _REQUEST_LOG_KEEP


def _request_log(raw: Any, where: str, rd: Reader) -> RequestLogSettings:
    block = rd.strict(raw, REQUEST_LOG_KEYS, where)
    contents = rd.boolean(block.get("contents", False), f"{where}.contents")
    keep = rd.integer(block.get("keep", _REQUEST_LOG_KEEP), f"{where}.keep", 1)
    return RequestLogSettings(contents=contents, keep=keep)


_CALIBRATION_EXTRA = frozenset({"refresh_seconds", "anchor_ttl"})
_CALIBRATION_KEYS = frozenset(CalibrationPolicy.__dataclass_fields__) | _CALIBRATION_EXTRA
#: Calibration knobs whose 0 turns a part off rather than being a mistake.
_CALIBRATION_ZERO_OK = frozenset({"interval"})
_STORE_PATH = "routefit.sqlite3"
_MAX_BODY = 32 * 1024 * 1024
#: Each retry is another provider call of the same request, with backoff: more than this
#: multiplies an outage's load and its clients' wait. Past it the file is refused, not clamped
#: (a silent 5 read as the 9 written).
_MAX_UPSTREAM_RETRIES = 5
#: OpenAI keeps a stored response 30 days.
_RESPONSES_TTL = 30 * 86_400
#: Bytes of stored responses one team keeps (``proxy.responses_store``): eight records of the
#: largest body, thousands of agent turns; a shared Redis holds budgets and calibration too.
_RESPONSES_STORE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Settings:
    redis_url: str | None = None
    #: Embedded store file (SQLite), absolute once loaded (``store_file``: a relative path is
    #: beside the config file); ":memory:" keeps nothing across restarts.
    store_path: str = _STORE_PATH
    max_body_bytes: int = _MAX_BODY
    upstream_timeout: float = 600.0
    #: SHA-256 of the key for routefit's own endpoints (usage, calibration); None = none.
    admin_key_hash: bytes | None = field(default=None, repr=False)
    #: SHA-256 of the key ``/metrics`` asks for (the admin key serves too); None: it asks none.
    #: Its series are per route, so a scrape around one team's request on a quiet route reads
    #: that request's size and cache: a shared gateway gives its scraper this key, not its teams
    #: the port (docs/security.md).
    metrics_key_hash: bytes | None = field(default=None, repr=False)
    #: When the store cannot answer a budget check: "open" admits (and counts it), "closed"
    #: answers 503. Open by default: a Redis outage should not take every team offline.
    budget_failure_mode: str = "open"
    #: Retries (with backoff) of an upstream failure before any byte reached the client.
    upstream_retries: int = 0
    #: A big prompt proved to fit by a bound is counted beside the forward; its answer waits for
    #: that count when true (``x-routefit-prompt-tokens`` is then never the bound), and goes
    #: out on the bound when the count is not in yet when false (proxy/gateway.py ``_told``).
    exact_prompt_headers: bool = False
    calibration: CalibrationPolicy = field(default_factory=CalibrationPolicy)
    #: The store and its Redis topology (``proxy.store.settings``).
    store: StoreSettings = field(default_factory=StoreSettings)
    #: Seconds between reloads of every route's samples from the store.
    calibration_refresh: float = 5.0
    #: Seconds a prefix anchor lives in the store.
    anchor_ttl: float = 3600.0
    #: Seconds a stored ``/v1/responses`` answer can be named by ``previous_response_id``.
    responses_ttl_seconds: int = _RESPONSES_TTL
    #: Bytes of stored responses one team keeps; at the bound its oldest are evicted (0: none
    #: is stored).
    responses_store_bytes_per_team: int = _RESPONSES_STORE_BYTES
    #: Auth, master key, TLS, trusted proxies (``proxy.config.access``; the loader fills it).
    access: Access = field(default_factory=Access)
    #: Provider body/event bounds and count-endpoint fairness (``TrustLimits``).
    limits: TrustLimits = field(default_factory=TrustLimits)
    #: The request log's contents opt-in and the records kept per team (``proxy.records``).
    request_log: RequestLogSettings = field(default_factory=RequestLogSettings)


def _calibration(raw: Any, where: str, rd: Reader) -> tuple[CalibrationPolicy, float, float]:
    """(policy, refresh seconds, anchor TTL seconds)."""
    cal = dict(rd.strict(raw, _CALIBRATION_KEYS, where))
    refresh = rd.number(cal.pop("refresh_seconds", 5.0), f"{where}.refresh_seconds")
    anchor_ttl = rd.number(cal.pop("anchor_ttl", 3600.0), f"{where}.anchor_ttl")
    for key, written in cal.items():
        value = scalar(written)  # an os.environ/NAME value is text: the policy gets the number
        if key in ("min_samples", "window"):
            cal[key] = rd.integer(value, f"{where}.{key}", 1)
        elif key == "model":  # a name, checked by CalibrationPolicy (it was refused as a number)
            cal[key] = str(rd.string(value, f"{where}.{key}"))
        elif key in _CALIBRATION_ZERO_OK and value == 0 and not isinstance(value, bool):
            cal[key] = 0  # "0: none", as docs/calibration.md says (it was refused as not positive)
        else:
            cal[key] = rd.number(value, f"{where}.{key}")
    try:
        return CalibrationPolicy(**cal), refresh, anchor_ttl
    except (TypeError, ValueError) as exc:
        raise rd.error(where, str(exc)) from None


def store_file(path: str, config_path: str) -> str:
    """The embedded store's file, absolute: a relative ``store_path`` (the default
    ``routefit.sqlite3`` too) is beside the config file, not in whatever folder a command
    happens to run from — ``routefit calibration`` run elsewhere reads the database ``serve``
    writes instead of creating an empty one."""
    if path == ":memory:":
        return path
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        path = os.path.join(os.path.dirname(os.path.abspath(config_path)), path)
    return os.path.normpath(path)


def read_settings(raw: Mapping[str, Any], rd: Reader, environ: Mapping[str, str]) -> Settings:
    """``raw`` is the block with its environment references already resolved."""
    where = "routefit_settings"
    try:
        store = parse_store_settings(raw, where, environ)
    except StoreSettingsError as exc:
        raise rd.error(exc.where, exc.message) from None
    store = replace(store, store_path=store_file(store.store_path, rd.path))
    mode = raw.get("budget_failure_mode", "open")
    if mode not in ("open", "closed"):
        raise rd.error(f"{where}.budget_failure_mode", "must be 'open' or 'closed'")
    admin = raw.get("admin_key")
    if admin is not None:
        admin = rd.string(admin, f"{where}.admin_key")
    scraper = raw.get("metrics_key")
    if scraper is not None:
        scraper = rd.string(scraper, f"{where}.metrics_key")
    retries = rd.integer(
        raw.get("upstream_retries", 0), f"{where}.upstream_retries", 0, _MAX_UPSTREAM_RETRIES
    )
    calibration, refresh, anchor_ttl = _calibration(
        raw.get("calibration"), f"{where}.calibration", rd
    )
    return Settings(
        redis_url=store.redis_url,
        store_path=store.store_path,
        store=store,
        max_body_bytes=rd.integer(
            raw.get("max_body_bytes", _MAX_BODY), f"{where}.max_body_bytes", 1024
        ),
        upstream_timeout=rd.number(raw.get("upstream_timeout", 600.0), f"{where}.upstream_timeout"),
        admin_key_hash=hash_key(admin) if admin else None,
        metrics_key_hash=hash_key(scraper) if scraper else None,
        budget_failure_mode=mode,
        upstream_retries=retries,
        exact_prompt_headers=rd.boolean(
            raw.get("exact_prompt_headers", False), f"{where}.exact_prompt_headers"
        ),
        calibration=calibration,
        calibration_refresh=refresh,
        anchor_ttl=anchor_ttl,
        responses_ttl_seconds=rd.integer(
            raw.get("responses_ttl_seconds", _RESPONSES_TTL), f"{where}.responses_ttl_seconds", 1
        ),
        responses_store_bytes_per_team=rd.integer(
            raw.get("responses_store_bytes_per_team", _RESPONSES_STORE_BYTES),
            f"{where}.responses_store_bytes_per_team",
        ),
        limits=_trust(raw, where, rd),
        request_log=_request_log(raw.get("request_log"), f"{where}.request_log", rd),
    )
