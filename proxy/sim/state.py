"""The simulator's mutable state: config, models, caches, faults, the request log, counters.

Handlers run on the server's event loop thread while tests read and reset the state from theirs:
every mutation that spans more than one field holds ``lock``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from proxy.sim.cache import BreakpointCache, PrefixCache
from proxy.sim.faults import FaultQueue
from proxy.sim.models import SimModel, builtin_models

__all__ = ["START_ONLY", "SimConfig", "SimState", "Stats"]

#: SimConfig fields ``POST /sim/config`` may not change: whoever can reach the simulator must
#: not be able to turn it into a fetcher of the host's loopback addresses.
START_ONLY = frozenset({"fetch_loopback_images"})


@dataclass
class SimConfig:
    #: Accepted API keys (``Authorization: Bearer`` / ``x-api-key``); ``None`` accepts any or none.
    api_keys: frozenset[str] | None = None
    #: Seconds between SSE events (per request: ``x-sim-chunk-delay`` header).
    chunk_delay: float = 0.0
    #: Request log size (``GET /sim/requests``).
    log_size: int = 200
    #: Reject unknown top-level request fields, like OpenAI and Anthropic do (False: ignore).
    strict_params: bool = True
    #: Size assumed for an image URL without a ``#WxH`` hint (and not fetched).
    assumed_image_size: tuple[int, int] = (1024, 1024)
    #: Fetch loopback image URLs (as OpenAI fetches URLs); failure → 400 like OpenAI. Off by
    #: default, and only settable at start (``--fetch-loopback-images``, or in process): a
    #: simulator that fetches for any client lets every client probe the host's ports.
    fetch_loopback_images: bool = False
    #: Digests kept per model by the prefix cache (one per 128-token block).
    cache_entries: int = 200_000
    #: Require the ``anthropic-version`` header on /v1/messages.
    require_anthropic_version: bool = True

    def update(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if key not in self.__dataclass_fields__:
                raise ValueError(f"unknown sim config key {key!r}")
            if key in START_ONLY:
                raise ValueError(f"{key} is set when the simulator starts, not over HTTP")
            if key == "api_keys" and value is not None:
                value = frozenset(value)
            if key == "assumed_image_size":
                value = tuple(value)
            setattr(self, key, value)

    def as_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["api_keys"] = None if self.api_keys is None else sorted(self.api_keys)
        out["assumed_image_size"] = list(self.assumed_image_size)
        return out


@dataclass
class Stats:
    requests_total: int = 0
    in_flight: int = 0
    streams_started: int = 0
    streams_completed: int = 0
    #: Streams the client abandoned (ASGI ``http.disconnect`` before the last event).
    streams_cancelled: int = 0
    #: Streams cut by a ``cut-stream`` fault.
    streams_cut: int = 0
    by_path: Counter[str] = field(default_factory=Counter)
    by_model: Counter[str] = field(default_factory=Counter)
    by_status: Counter[int] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def streams_open(self) -> int:
        return (
            self.streams_started
            - self.streams_completed
            - self.streams_cancelled
            - self.streams_cut
        )


class SimState:
    def __init__(
        self, models: Iterable[SimModel] | None = None, config: SimConfig | None = None
    ) -> None:
        self.config = config or SimConfig()
        self.lock = threading.RLock()
        self.models: dict[str, SimModel] = {}
        self._aliases: dict[str, str] = {}
        self.prefix_caches: dict[str, PrefixCache] = {}
        self.breakpoint_caches: dict[str, BreakpointCache] = {}
        self.faults = FaultQueue()
        self.stats = Stats()
        self.log: deque[dict[str, Any]] = deque(maxlen=self.config.log_size)
        self._ids = itertools.count(1)
        #: Set by the runner: how many TCP connections the server holds open right now.
        self.connection_counter: Callable[[], int] | None = None
        for model in builtin_models() if models is None else models:
            self.add_model(model)

    # models ---------------------------------------------------------------------------------
    def add_model(self, model: SimModel) -> None:
        with self.lock:
            self.models[model.name] = model
            for alias in model.aliases:
                self._aliases[alias] = model.name
            self.prefix_caches[model.name] = PrefixCache(
                model.cache_block, model.cache_min, self.config.cache_entries
            )
            self.breakpoint_caches[model.name] = BreakpointCache(model.cache_min)

    def model(self, name: str) -> SimModel | None:
        model = self.models.get(name)
        if model is None and name in self._aliases:
            model = self.models.get(self._aliases[name])
        return model

    # request log and counters ----------------------------------------------------------------
    def next_id(self) -> int:
        return next(self._ids)

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            if self.log.maxlen != self.config.log_size:
                self.log = deque(self.log, maxlen=self.config.log_size)
            self.log.append(entry)

    def requests(self, limit: int | None = None, path: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            out = [e for e in self.log if path is None or e["path"] == path]
        return out[-limit:] if limit else out

    def stats_json(self) -> dict[str, Any]:
        s = self.stats
        with self.lock:
            return {
                "requests_total": s.requests_total,
                "in_flight": s.in_flight,
                "streams_started": s.streams_started,
                "streams_completed": s.streams_completed,
                "streams_cancelled": s.streams_cancelled,
                "streams_cut": s.streams_cut,
                "streams_open": s.streams_open,
                "connections_open": self.connection_counter() if self.connection_counter else None,
                "by_path": dict(s.by_path),
                "by_model": dict(s.by_model),
                "by_status": {str(k): v for k, v in s.by_status.items()},
                "faults": dict(s.faults),
                "time": time.time(),
            }

    def reset(self) -> None:
        """Forget requests, faults, caches and counters (streams still open stay counted)."""
        with self.lock:
            self.log.clear()
            self.faults.clear()
            for cache in self.prefix_caches.values():
                cache.clear()
            for bcache in self.breakpoint_caches.values():
                bcache.clear()
            open_streams = self.stats.streams_open
            in_flight = self.stats.in_flight
            self.stats = Stats(in_flight=in_flight, streams_started=open_streams)
