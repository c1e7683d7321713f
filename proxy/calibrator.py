"""Calibration in the running proxy: samples in, corrections and anchors out, store in between.

* Corrections are read from memory on the request path (never a round trip); a background task
  refreshes every route's samples from the store every few seconds, so replicas sharing Redis
  converge on the same factors, and a restart starts from what was learnt.
* Samples and anchors are written off the response path through a bounded queue. When the store
  is slow or down they are dropped and counted; a response never waits for the store.
* Anchor lookups are the one store round trip on the request path (one MGET); when the store is
  down they are skipped, and the estimate falls back to the calibrated one.
* An outage is logged once when it starts and once when it ends, never per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import xxhash

from pricing.calibration import (
    FEATURES,
    Anchor,
    CalibrationPolicy,
    Correction,
    Sample,
    anchor_of,
    checkpoint_anchors,
    fit_correction,
    implausible_count,
    pressure_features,
    sample_of,
)
from pricing.digest import long_digest, value_digest
from pricing.meter import Pressure
from proxy.metrics import Metrics
from proxy.store import Store, StoreUnavailable
from proxy.store.base import AnchorWrite

__all__ = ["Calibrator", "prefix_keys", "summarize"]

log = logging.getLogger("routefit.calibration")

#: How many of the longest prefixes of a request are looked up in a shared store (a new turn
#: adds a few messages); memory answers for every prefix. Beyond LOOKBACK, up to STORE_KEYS
#: older prefixes are asked too, so that a head kept through a cut still finds its checkpoint.
LOOKBACK = 64
STORE_KEYS = 192
REFIT_SAMPLES = 16
#: How long the writer lets samples gather after the first before writing them in one batch.
_GATHER_SECONDS = 0.02
REFIT_SECONDS = 1.0
#: The least time between two refits of a route that has learnt: a refit runs on the event loop,
#: and every 16 samples of a route taking hundreds of requests a second was a twentieth of the
#: small path's CPU. A quarter second late is still fresh.
REFIT_GAP = 0.25
#: The most of the loop's time one route's refits may take: a refit of a full window costs 2 ms
#: on an exact meter and 7-30 ms on a route whose tokenizer routefit does not know (its every
#: sample mispriced by a little, each refit due at once: 10% of the server's samples under
#: load at ``REFIT_GAP`` alone, four stalls of the loop a second). The gap after a refit is at
#: least its own cost divided by this share (``_Route.gap``).
REFIT_SHARE = 0.02
#: A sample its route's correction prices at its count, or above it by at most one part in
#: ``AGREE`` (0.5%) and a token of rounding, asks for no refit (``_agrees``): on a route whose
#: meter is exact every sample does, and refitting a full window four times a second to find
#: the same weights was 2.8% of the server's CPU at small c16 (bench/REPORT.md, 1g).
AGREE = 200


def prefix_keys(
    route: str,
    model: str,
    tools: Any,
    messages: Sequence[Any],
    scope: str | None = None,
    long: Sequence[bool] = (),
) -> list[bytes]:
    """Chained digests of every message prefix, index i = the first i+1 messages (a message
    ``long`` names, by index, with its long strings digested apart: ``pricing.digest``).

    The chain starts from the route, the upstream model and the tool definitions, so an anchor
    only matches a prompt with the same tools sent to the same model — and from ``scope``, the
    team that sent it: an anchor is a fact about a prompt (the provider's count of it), and
    nothing derived from one team's prompt may show in another team's estimates
    (docs/security.md, "Isolation of prompt-derived facts"). None: no teams, one tenant.
    """
    head = [route, model, tools] if scope is None else [route, model, tools, scope]
    h = value_digest(head, sort_keys=True)
    keys = []
    digest, dumps, sort = xxhash.xxh3_128_digest, orjson.dumps, orjson.OPT_SORT_KEYS
    for i, message in enumerate(messages):
        if i < len(long) and long[i]:
            h = digest(h + long_digest(message, sort_keys=True))
        else:  # ``value_digest``, inline: a session's every message, every turn
            h = digest(h + digest(dumps(message, option=sort)))
        keys.append(h)
    return keys


class _AnchorCache:
    """The anchors this process wrote, by (route, prefix key): a bounded LRU with expiry.

    Most anchor hits are the previous turn of a session this process just answered; finding
    them in memory spares the store round trip (and, for the embedded store, a thread hop)."""

    def __init__(self, ttl: float, maxsize: int = 65536) -> None:
        self.ttl = ttl
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[str, bytes], tuple[float, Anchor]] = OrderedDict()

    def put(self, route: str, key: bytes, anchor: Anchor) -> None:
        self._data[(route, key)] = (time.monotonic() + self.ttl, anchor)
        self._data.move_to_end((route, key))
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def find(self, route: str, candidates: Sequence[bytes]) -> tuple[int, Anchor] | None:
        now = time.monotonic()
        for i, key in enumerate(candidates):
            found = self._data.get((route, key))
            if found is not None and found[0] > now:
                self._data.move_to_end((route, key))
                return i, found[1]
        return None


_Queued = tuple[Sample, bytes | None, Anchor | None, tuple[tuple[bytes, Anchor], ...]]


@dataclass(slots=True)
class _Route:
    samples: deque[Sample]
    correction: Correction
    exact: bool = True
    #: The route's tokenizer (what its prior adds for other scripts: ``fit_correction``).
    meter: str = "o200k_base"
    #: Samples added since the correction was last fitted that it does not price already
    #: (``_agrees``), and when that fit was (monotonic).
    pending: int = 0
    fitted_at: float = 0.0
    #: How long the last refit took (seconds): the next one waits ``gap``.
    cost: float = 0.0
    #: The route's prior (its correction before any sample): what ``implausible_count`` measures a
    #: provider's count against; None for a route not tracked (the loosest prior then).
    prior: Correction | None = None
    #: Stored samples the last refresh could not believe (``_sane``): logged when it changes.
    unreadable: int = 0
    #: Samples the writer has added to ``samples``, and how many of them (the first, in order)
    #: it is done storing: a refresh's read may not return the others (``_unread``).
    added: int = 0
    stored: int = 0

    @property
    def gap(self) -> float:
        """The least time after a refit before the next one (``REFIT_GAP``, ``REFIT_SHARE``)."""
        return max(REFIT_GAP, self.cost / REFIT_SHARE)


class Calibrator:
    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        policy: CalibrationPolicy | None = None,
        *,
        refresh_seconds: float = 5.0,
        anchor_ttl: float = 3600.0,
        queue_size: int = 2048,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.policy = policy or CalibrationPolicy()
        self.refresh_seconds = refresh_seconds
        self.anchor_ttl = anchor_ttl
        self.routes: dict[str, _Route] = {}
        self.queue: asyncio.Queue[_Queued] = asyncio.Queue(queue_size)
        self.store_up = True
        self.dropped = 0
        self.recorded = 0
        #: Provider counts not believed (``proxy.usage.usage_fault``; absurd sample figures).
        self.rejected = 0
        self.anchor_hits = 0
        self.anchor_lookups = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._anchors = _AnchorCache(anchor_ttl)
        #: The loosest prior (an inexact o200k route's): a route not tracked is judged by it.
        self._loosest = fit_correction((), self.policy, False)

    # -- request path (no I/O except the anchor lookup) -----------------------------------

    def correction(self, route: str) -> Correction:
        state = self.routes.get(route)
        return state.correction if state is not None else Correction()

    async def find_anchor(self, route: str, keys: Sequence[bytes]) -> tuple[int, Anchor] | None:
        """Longest anchored prefix among ``keys`` (index i = first i+1 messages): from this
        process's memory first, then — only for a store other processes write to — from the
        store in one round trip."""
        if not keys:
            return None
        candidates = list(reversed(keys))
        self.anchor_lookups += 1
        hit = self._anchors.find(route, candidates)
        if hit is None and self.store.shared and self.store_up:
            try:
                hit = await self.store.find_anchor(route, candidates[:STORE_KEYS])
            except StoreUnavailable:
                self._down("anchor lookup")
                self.metrics.anchor_lookups.labels("error").inc()
                return None
        if hit is None:
            self.metrics.anchor_lookups.labels("miss").inc()
            return None
        index, anchor = hit
        if not _sane_anchor(anchor):
            # a store written by an older version, or corrupted: an anchor that would price the
            # request at nothing (or fail to price it) is not the provider's count of anything
            log.warning("anchor with absurd figures ignored on %s", route)
            self.metrics.anchor_lookups.labels("miss").inc()
            return None
        self.anchor_hits += 1
        self.metrics.anchor_lookups.labels("hit").inc()
        return len(keys) - 1 - index, anchor

    def observe(
        self,
        route: str,
        pressure: Pressure,
        keys: Sequence[bytes],
        estimate: int,
        anchored: bool,
        actual: int,
        cached: int = 0,
    ) -> None:
        """What the provider counted for a prompt as sent (``keys``: its prefix keys): one
        sample, the prompt's anchor, and anchors at its checkpoint prefixes (so that a later
        cut that keeps the head still starts from the provider's count)."""
        feats = pressure_features(pressure)  # once: the sample and the anchors share them
        sample = sample_of(route, time.time(), pressure, estimate, anchored, actual, cached, feats)
        state = self.routes.get(route)
        prior = (state.prior if state is not None else None) or self._loosest
        why = implausible_count(feats, actual, prior, self.policy)
        if why is not None:  # no tokenizer's count of it: neither sample nor anchor
            self._refuse(route, why)
            return
        if len(keys) != len(pressure.messages) or not keys:
            self.submit(sample, None, None)
            return
        correction = self.correction(route)
        checkpoints = checkpoint_anchors(pressure, actual, correction, features=feats)
        extra = [(keys[n - 1], anchor) for n, anchor in checkpoints]
        self.submit(sample, keys[-1], anchor_of(pressure, actual, feats), extra)

    def _refuse(self, route: str, why: str) -> None:
        """A provider count not believed: neither sample nor anchor; logged and counted."""
        self.rejected += 1
        self.metrics.samples.labels("rejected").inc()
        log.warning("provider count rejected on %s: %s", route, why)

    def submit(
        self,
        sample: Sample,
        key: bytes | None,
        anchor: Anchor | None,
        extra: Sequence[tuple[bytes, Anchor]] = (),
    ) -> None:
        """Queue a sample (and the anchors of the prompt it measured); never blocks. A sample
        with a figure no store can hold is refused here (counted), not lost with its batch."""
        if not _sane(sample):
            self._refuse(sample.route, "calibration sample with absurd figures")
            return
        for k, a in extra:
            self._anchors.put(sample.route, k, a)
        if key is not None and anchor is not None:
            self._anchors.put(sample.route, key, anchor)
        try:
            self.queue.put_nowait((sample, key, anchor, tuple(extra)))
        except asyncio.QueueFull:
            self.dropped += 1
            self.metrics.samples.labels("dropped").inc()

    # -- background -----------------------------------------------------------------------

    def start(self, routes: Mapping[str, bool], meters: Mapping[str, str] | None = None) -> None:
        """Begin the background tasks; ``routes`` maps each alias to whether its meter is
        exact (inexact routes start from the policy's conservative prior), ``meters`` to its
        tokenizer (o200k when not given)."""
        self.track(routes, meters)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._writer()), loop.create_task(self._refresher())]

    def track(self, routes: Mapping[str, bool], meters: Mapping[str, str] | None = None) -> None:
        """Learn for ``routes`` too (a reloaded config's new aliases, ``proxy.reload``): an
        alias already tracked keeps what it learnt unless its meter changed."""
        for route, exact in routes.items():
            meter = (meters or {}).get(route, "o200k_base")
            known = self.routes.get(route)
            if known is not None and (known.exact, known.meter) == (exact, meter):
                continue
            prior = fit_correction((), self.policy, exact, meter)
            self.routes[route] = _Route(
                deque(maxlen=self.policy.window), prior, exact, meter, prior=prior
            )

    async def stop(self) -> None:
        # Give queued samples a moment to reach the store, then stop.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.queue.join(), timeout=2.0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            # a cancel that lands as a store call returns can be lost (the refresher then slept
            # on and the lifespan's end waited for ever, seen in process): repeat it until done
            while not task.done():
                await asyncio.wait({task}, timeout=0.1)
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _writer(self) -> None:
        """Drain the queue in batches: one store round trip and one refit per batch."""
        while True:
            batch = [await self._next()]
            # Let a busy worker's samples gather: one store transaction (a thread hop for the
            # embedded store) per sample cost a tenth of the small path's CPU at 16 clients.
            await asyncio.sleep(_GATHER_SECONDS)
            while len(batch) < 256:
                try:
                    batch.append(self.queue.get_nowait())
                except asyncio.QueueEmpty:
                    break
            try:
                await self._write(batch)
            except Exception:  # a bug here must not kill the writer
                log.exception("calibration writer failed on a batch")
                self.dropped += len(batch)
                self.metrics.samples.labels("dropped").inc(len(batch))
            finally:
                for _ in batch:
                    self.queue.task_done()

    async def _next(self) -> _Queued:
        """The next queued sample. While a route holds samples its last refit was too recent to
        take (its ``gap``), a quiet spell refits it once the gap has passed, so no sample waits
        for traffic."""
        while True:
            deferred = [state for state in self.routes.values() if state.pending]
            if not deferred:
                return await self.queue.get()
            wait = min(state.fitted_at + state.gap for state in deferred) - time.monotonic()
            try:
                return await asyncio.wait_for(self.queue.get(), max(0.0, wait))
            except TimeoutError:
                now = time.monotonic()
                for state in deferred:
                    if now - state.fitted_at >= state.gap:
                        self._refit(state, now)

    async def _write(self, batch: list[_Queued]) -> None:
        for sample, _, _, _ in batch:
            state = self.routes.setdefault(
                sample.route, _Route(deque(maxlen=self.policy.window), Correction())
            )
            state.samples.append(sample)
            state.added += 1
            state.pending += not _agrees(state.correction, sample)
        now = time.monotonic()
        for state in self.routes.values():
            if state.pending and self._due(state, now):
                self._refit(state, now)
        samples = [sample for sample, _, _, _ in batch]
        anchors = self._shared_anchors(batch)
        try:
            await self.store.record_batch(samples, anchors, self.anchor_ttl)
        except StoreUnavailable:
            self._down("sample write")
            self.dropped += len(batch)
            self.metrics.samples.labels("dropped").inc(len(batch))
        else:
            self._up()
            self.recorded += len(batch)
            self.metrics.samples.labels("recorded").inc(len(batch))
        finally:  # taken, or dropped with the store away: what a refresh reads is settled
            for sample in samples:
                self.routes[sample.route].stored += 1

    def _shared_anchors(self, batch: Sequence[_Queued]) -> list[AnchorWrite]:
        """The batch's anchors, for a store other processes read them from. No one reads an
        anchor back from the embedded store (``shared`` false: this process answers its own
        from memory), and writing them was ~40% of that store thread's CPU per request."""
        if not self.store.shared:
            return []
        anchors = [(s.route, k, a) for s, _, _, extra in batch for k, a in extra]
        own = [(s.route, k, a) for s, k, a, _ in batch if k is not None and a is not None]
        return anchors + own

    async def refresh(self) -> None:
        """Reload every route's samples from the store and refit its correction."""
        for route, state in list(self.routes.items()):  # the writer may add one meanwhile
            stored = state.stored
            try:
                samples = await self.store.recent_samples(route, self.policy.window)
            except StoreUnavailable:
                self._down("refresh")
                return
            self._up()
            samples = self._readable(route, state, samples)
            samples += _unread(state, state.added - stored, samples)
            if samples:
                state.samples = deque(samples, maxlen=self.policy.window)
                self._refit(state, time.monotonic())

    def _readable(self, route: str, state: _Route, samples: Sequence[Sample]) -> list[Sample]:
        """The stored samples a refit may use: one an older version or a corrupted store wrote
        with a figure that is not a count (a string, a float, a huge number) would fail every
        refit of the route, the writer's too; one whose count no tokenizer could give
        (``implausible_count``) would be fitted. Logged when their number changes (the same
        ones are read back every refresh)."""
        prior = state.prior or self._loosest
        kept = [
            s
            for s in samples
            if _sane(s) and implausible_count(s.vector, s.actual, prior, self.policy) is None
        ]
        skipped = len(samples) - len(kept)
        if skipped != state.unreadable:
            log.warning("%d stored samples of %s ignored: absurd figures", skipped, route)
            state.unreadable = skipped
        return kept

    def _due(self, state: _Route, now: float) -> bool:
        """Refit while a route is still learning, then once ``REFIT_SAMPLES`` samples or
        ``REFIT_SECONDS`` have passed, but never within the route's ``gap`` of the last refit: a
        fit costs milliseconds, which must not land on every request of a busy route."""
        if len(state.samples) < 2 * self.policy.min_samples:
            return True
        since = now - state.fitted_at
        return since >= state.gap and (state.pending >= REFIT_SAMPLES or since >= REFIT_SECONDS)

    def _refit(self, state: _Route, now: float) -> None:
        started = time.perf_counter()
        state.correction = fit_correction(state.samples, self.policy, state.exact, state.meter)
        state.cost = time.perf_counter() - started
        state.pending = 0
        state.fitted_at = now

    async def _refresher(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:
                log.exception("calibration refresh failed")
            await asyncio.sleep(self.refresh_seconds)

    def _down(self, what: str) -> None:
        if self.store_up:
            log.warning(
                "store %s unavailable (%s); serving with the last known calibration",
                self.store.name,
                what,
            )
        self.store_up = False
        self.metrics.store_up.set(0)

    def _up(self) -> None:
        if not self.store_up:
            log.warning("store %s is back; calibration resumes", self.store.name)
        self.store_up = True
        self.metrics.store_up.set(1)

    # -- visibility -----------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """GET /routefit/calibration: per route, what was learnt and how good it is."""
        return {
            "routes": {
                route: summarize(state.samples, state.correction)
                for route, state in sorted(self.routes.items())
            },
            "store": {"name": self.store.name, "up": self.store_up},
            "samples_recorded": self.recorded,
            "samples_dropped": self.dropped,
            "samples_rejected": self.rejected,
            "anchor_lookups": self.anchor_lookups,
            "anchor_hit_rate": self.anchor_hits / self.anchor_lookups
            if self.anchor_lookups
            else 0.0,
            "time": time.time(),
        }


#: The largest figure a sample may carry: far above any window, far below what a store's integer
#: (SQLite's and Redis's 64 bits) or a float's exact range can hold.
_MOST = 2**40


def _unread(state: _Route, newest: int, stored: Sequence[Sample]) -> list[Sample]:
    """Of the ``newest`` samples of ``state`` (those the store had not taken when a refresh
    began to read it), the ones the read did not return: they are not in what it replaces the
    window with, and dropped out of the window and the correction until the next refresh."""
    if newest <= 0:
        return []
    known = set(stored)
    return [s for s in list(state.samples)[-newest:] if s not in known]


def _agrees(correction: Correction, sample: Sample) -> bool:
    """Whether ``correction`` prices ``sample`` as a refit would leave it: by its weights, not
    under the provider's count, and over it by at most one part in ``AGREE`` and a token. A
    refit moves the weights only for samples it misprices; it is the same fit otherwise — so
    a restart, which fits all the samples at once, finds the weights the route had. By the
    weights, not the estimate: a sample the interval covers and the weights price under moves
    the fit (on an inexact route a tenth of them, the scale-up's quantile there; the refits
    stay at most one per ``REFIT_GAP``)."""
    over = correction.price(sample.vector) - sample.actual
    return 0 <= over <= sample.actual // AGREE + 1


def _count(x: object) -> bool:
    """A whole number a store can hold (a bool is not one: JSON's true is no count)."""
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= _MOST


def _sane(sample: Sample) -> bool:
    """Whether every figure of ``sample`` is a count (its time a finite number, ``anchored`` a
    bool): what the writer queues, and what a refit reads back from a store."""
    figures = (sample.text, sample.framing, sample.images, sample.estimate, sample.actual)
    counts = (*figures, sample.cached, sample.image_count, sample.message_count)
    return (
        all(map(_count, (*counts, *sample.features)))
        and isinstance(sample.anchored, bool)
        and isinstance(sample.time, int | float)
        and math.isfinite(sample.time)
    )


def _sane_anchor(anchor: Anchor) -> bool:
    """Whether ``anchor`` holds counts, its provider count above nothing."""
    figures = (anchor.text, anchor.framing, anchor.images, *anchor.features)
    return all(map(_count, figures)) and _count(anchor.actual) and anchor.actual > 0


def summarize(samples: Sequence[Sample], correction: Correction) -> dict[str, Any]:
    """One route's calibration: sample count, factors, estimate error percentiles."""
    errors = sorted((s.estimate - s.actual) / s.actual for s in samples if s.actual > 0)
    return {
        "samples": len(samples),
        "factors": {
            "text": correction.text,
            "framing": correction.framing,
            "images": correction.images,
        },
        "weights": dict(zip(FEATURES, correction.vector, strict=True)),
        "fitted_on": correction.samples,
        # on its prior (an inexact route that has not learnt): refusals are made on the meter's
        # count, not on these weights (``proxy.estimate.Job.fit``)
        "provisional": correction.provisional,
        # what a request's estimate adds for the weights' doubt, relative to their price (the
        # median over the window's samples; 0 on an exact meter): docs/calibration.md
        "interval": _interval_share(samples, correction),
        "relative_error": _percentiles(errors),
        "anchored_share": sum(s.anchored for s in samples) / len(samples) if samples else 0.0,
    }


def _interval_share(samples: Sequence[Sample], correction: Correction) -> float:
    if not correction.interval or not samples:
        return 0.0
    shares = sorted(
        correction.margin(s.vector) / max(1, correction.price(s.vector)) for s in samples
    )
    return round(shares[len(shares) // 2], 5)


def _percentiles(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None

    def pick(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 5)

    return {"p05": pick(0.05), "p50": pick(0.5), "p95": pick(0.95), "max": round(values[-1], 5)}
