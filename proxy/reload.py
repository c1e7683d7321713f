"""Live configuration: the config file reloaded while routefit serves (SIGHUP, or
``POST /routefit/reload``), with nothing in flight disturbed.

What a config decides lives in one immutable value, a ``Generation``: the parsed config, the
provider table built from its routes, the provider keys, the gateway (teams and their keys and
quotas, the intake, the estimator, the request log's sinks), the dashboard over them and the
OpenAPI document. What outlives a reload is not in it: the metrics, the store, the calibrator
(what it learnt stays; new aliases are tracked), the team budgets' counters (in the store), the
image sizer, the in-process simulator of ``sim://`` routes.

A reload builds the next generation beside the running one and swaps one reference
(``Live.current``, ``proxy.generation``); the old generation is never changed. Every request
is pinned to the generation current when it arrived (``Pin``, the app's outermost middleware,
puts it in the ASGI scope; handlers read it with ``pinned``), so a request or stream in flight
finishes on the config it started with, and a new one sees the new config as a whole, never a
mix. A retired generation's provider connections and trace exporter are closed once its last
request ends.

A new config is refused, and the running one stays, when it does not load (the loader's message,
logged at ERROR and answered by the endpoint), when a route's tokenizer cannot be loaded, or when
it would turn a gateway that requires keys into an open one (no team, admin or master key left:
almost always a file cut short, and an open gateway admits anyone). Settings that shape
long-lived resources — the store, calibration, the budget failure mode, TLS, trusted proxies,
the simulator's image fetching — are read at start-up only: a change to them is logged as a
warning ("restart to apply") and the rest of the file applies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from pricing.tokenizers import warm_up
from proxy.config import Config, ConfigError, load_config
from proxy.generation import Generation, Shared, build_generation, retire
from proxy.local_provider import attach
from proxy.state import AppState
from proxy.transports import start as start_providers

__all__ = ["checked", "refused", "reload", "summary"]

log = logging.getLogger("routefit")


def _prepare(path: str) -> Config:
    """The config at ``path``, checked as far as a running server needs (in a thread: a YAML
    file, the model map, tokenizer files)."""
    config = load_config(path)
    for rc in config.every_deployment():
        try:
            warm_up(rc.route.tokenizer)
        except Exception as exc:
            where = f"{rc.route.alias!r} (deployment {rc.deployment_id!r})"
            raise ConfigError(f"{config.path}: route {where}: {exc}") from None
    return config


#: Settings read at start-up only (see the module doc): (name, how to read it).
_AT_START: Sequence[tuple[str, Any]] = (
    ("store (redis_url, store_path, ...)", lambda s: s.store),
    ("calibration", lambda s: (s.calibration, s.calibration_refresh, s.anchor_ttl)),
    ("budget_failure_mode", lambda s: s.budget_failure_mode),
    (
        "tls / trusted_proxies",
        lambda s: (s.access.tls_certfile, s.access.tls_keyfile, s.access.trusted_proxies),
    ),
    ("simulator.fetch_loopback_images", lambda s: s.access.sim_fetch_loopback_images),
)


def _kept(old: Config, new: Config) -> list[str]:
    return [name for name, read in _AT_START if read(old.settings) != read(new.settings)]


async def checked(state: AppState) -> Config:
    """The config file read again and checked as a reload would apply it (raises ConfigError);
    nothing applied."""
    old = state.live.current.config
    config = await asyncio.to_thread(_prepare, old.path)
    if not old.open and config.open:
        raise ConfigError(
            f"{config.path}: no team, admin key or master key is left: the gateway would run "
            "OPEN (every request admitted); restart routefit to run it open"
        )
    return config


def refused(state: AppState, cause: str, exc: ConfigError) -> None:
    """A refused reload: logged at ERROR with the reason, counted."""
    state.metrics.config_reloads.labels("refused").inc()
    log.error(
        "config reload (%s) refused; still serving generation %d: %s",
        cause,
        state.live.current.number,
        exc,
    )


async def reload(state: AppState, cause: str) -> Generation:
    """Load the config file again and serve it from now on; raises ConfigError (logged at
    ERROR, counted) and leaves the running config serving when the new one is refused."""
    async with state.reloading:
        try:
            g = await _next(state)
        except ConfigError as exc:
            refused(state, cause, exc)
            raise
        except Exception as exc:  # nothing is swapped before the end: the running config stays
            log.exception("config reload (%s) failed", cause)
            failed = ConfigError(f"{state.live.current.config.path}: the reload failed: {exc}")
            refused(state, cause, failed)
            raise failed from exc
        state.metrics.config_reloads.labels("applied").inc()
        log.info(
            "config reloaded (%s) from %s: generation %d, %d route(s), %d team(s)",
            cause,
            g.config.path,
            g.number,
            len(g.config.routes),
            len(g.config.teams),
        )
        return g


async def _next(state: AppState) -> Generation:
    old = state.live.current
    config = await checked(state)
    config, local = attach(config, serve=state.transport is None, running=state.local)
    if local is not None and state.local is None:
        await asyncio.to_thread(local.start)  # the first sim:// route: its simulator
        state.local = local
    for name in _kept(old.config, config):
        log.warning("config reload: %s changed in the file: restart routefit to apply it", name)
    shared = Shared(state.metrics, state.calibrator, state.budgets, state.sizer, state.transport)
    g = build_generation(old.number + 1, config, shared, old)
    start_providers(g.providers)
    deployments = config.every_deployment()
    state.calibrator.track(
        {rc.calibration_key: rc.route.exact_text for rc in deployments},
        {rc.calibration_key: rc.route.tokenizer for rc in deployments},
    )
    g.keys.log_warnings()
    for warning in config.warnings:
        log.warning("%s", warning)
    done = state.live.swap(g)
    if done is not None:
        await retire(done)
    return g


def summary(g: Generation) -> dict[str, Any]:
    """``POST /routefit/reload``'s answer: what now serves."""
    return {
        "reloaded": True,
        "generation": g.number,
        "config": g.config.path,
        "routes": sorted(g.config.routes),
        "teams": len(g.config.teams),
        "warnings": list(g.config.warnings),
    }
