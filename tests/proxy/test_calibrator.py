"""The running calibrator's refit schedule, on the embedded store (no HTTP: the schedule is
the calibrator's own, and the gateway tests cover the path that feeds it)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections import deque
from dataclasses import replace
from pathlib import Path

import pytest
from harness import private_redis

from pricing.calibration import (
    FEATURES,
    Anchor,
    CalibrationPolicy,
    Correction,
    Sample,
    anchor_of,
    anchored_estimate,
    checkpoint_anchors,
    fit_correction,
)
from pricing.framing import Framing
from pricing.images.catalogue import default_image_rule
from pricing.messages import parse_request
from pricing.meter import Pressure
from pricing.route import Route
from proxy.calibrator import (
    REFIT_GAP,
    REFIT_SAMPLES,
    REFIT_SECONDS,
    Calibrator,
    _AnchorCache,
    _Route,
    prefix_keys,
    summarize,
)
from proxy.metrics import Metrics
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore
from strategies.fit import fit
from strategies.policy import FitPolicy

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sample(n: int, over: float = 1.0) -> Sample:
    """The ``n``-th of a route's samples, whose counts grow linearly with their text (a fit
    prices the next ones right); ``over``: its count that many times higher."""
    return Sample(
        route="r",
        time=time.time(),
        text=1000 + 37 * n,
        framing=40,
        images=0,
        image_count=0,
        message_count=3,
        estimate=1040 + 37 * n,
        anchored=False,
        actual=round((1100 + 41 * n) * over),
    )


async def _fitted_on(calibrator: Calibrator, count: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if calibrator.correction("r").samples == count:
            return True
        await asyncio.sleep(0.02)
    return False


async def _learnt() -> tuple[Calibrator, int]:
    """A started calibrator (the store refresh pushed out of the way) whose route "r" has
    learnt, and the number of samples it learnt on."""
    policy = CalibrationPolicy()
    calibrator = Calibrator(SqliteStore(":memory:"), Metrics(), policy, refresh_seconds=3600)
    calibrator.start({"r": True})
    learning = 2 * policy.min_samples
    for n in range(learning):
        calibrator.submit(_sample(n), None, None)
    await calibrator.queue.join()
    assert await _fitted_on(calibrator, learning, time.monotonic() + 20 * REFIT_GAP)
    return calibrator, learning


async def test_samples_held_back_by_the_refit_gap_are_fitted_once_traffic_stops() -> None:
    """A learnt route refits at most every REFIT_GAP; the samples that arrive inside the gap
    must still be fitted when no more traffic comes (not wait for the next request, nor for
    the store refresh, which is pushed out of the way here). They are 10% over what the
    correction prices: samples it prices right ask for no refit (the next test)."""
    calibrator, learning = await _learnt()
    try:
        for n in range(learning, learning + 3):
            calibrator.submit(_sample(n, over=1.1), None, None)
        await calibrator.queue.join()
        assert await _fitted_on(calibrator, learning + 3, time.monotonic() + 20 * REFIT_GAP)
    finally:
        await calibrator.stop()


async def test_samples_the_correction_prices_right_ask_for_no_refit() -> None:
    """A learnt route whose correction prices new samples at their counts keeps it however
    many arrive (a refit would find the same weights, at milliseconds of the event loop a
    time); the first sample it misprices is fitted, and so are the ones before it."""
    calibrator, learning = await _learnt()
    try:
        learnt = calibrator.correction("r")
        # samples the correction prices at their counts, as many as would make a refit due
        right = [
            replace(_sample(n), actual=learnt.price(_sample(n).vector))
            for n in range(learning, learning + 2 * REFIT_SAMPLES)
        ]
        for sample in right:
            calibrator.submit(sample, None, None)
        await calibrator.queue.join()
        await asyncio.sleep(REFIT_SECONDS + 2 * REFIT_GAP)  # past every refit timer
        assert calibrator.correction("r") is learnt

        calibrator.submit(_sample(learning + 40, over=0.9), None, None)  # priced 10% over
        await calibrator.queue.join()
        total = learning + len(right) + 1
        assert await _fitted_on(calibrator, total, time.monotonic() + 20 * REFIT_GAP)
    finally:
        await calibrator.stop()


class _Timed(Calibrator):
    """The real calibrator, noting the clock reading each refit of a route was made at."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.refits: list[tuple[str, float]] = []

    def _refit(self, state: _Route, now: float) -> None:
        route = next(name for name, s in self.routes.items() if s is state)
        self.refits.append((route, now))
        super()._refit(state, now)


async def _refit_of(calibrator: _Timed, route: str, after: int) -> None:
    """Wait (bounded) until ``route`` has been refitted after the first ``after`` refits."""
    deadline = time.monotonic() + 40 * REFIT_GAP
    while time.monotonic() < deadline:
        if any(r == route for r, _ in calibrator.refits[after:]):
            return
        await asyncio.sleep(0.01)


def _sample_of(route: str, n: int, learnt: int | None = None) -> Sample:
    """Route ``route``'s ``n``-th sample; past the first ``learnt``, each counted 10% more
    than the one before: no correction fitted on them prices the next one (each asks for a
    refit, which the gap may hold back)."""
    over = 1.0 if learnt is None else 1.1 ** max(0, n - learnt + 1)
    return replace(_sample(n, over=over), route=route)


async def test_a_learnt_route_is_never_refitted_within_the_gap_of_its_last_refit() -> None:
    """'Never within REFIT_GAP', with two learnt routes whose last refits are apart: the quiet
    spell that is due for one must not refit the other early, and a burst of REFIT_SAMPLES
    right after a refit waits for the gap."""
    policy = CalibrationPolicy()
    calibrator = _Timed(SqliteStore(":memory:"), Metrics(), policy, refresh_seconds=3600)
    calibrator.start({"a": True, "b": True})
    try:
        learning = 2 * policy.min_samples
        for route in ("a", "b"):
            for n in range(learning):
                calibrator.submit(_sample_of(route, n), None, None)
        await calibrator.queue.join()
        await asyncio.sleep(2 * REFIT_GAP)
        learnt = len(calibrator.refits)
        # a refits, then b a little later; then both get a sample inside both gaps
        calibrator.submit(_sample_of("a", learning, learning), None, None)
        await _refit_of(calibrator, "a", learnt)
        await asyncio.sleep(REFIT_GAP / 3)
        calibrator.submit(_sample_of("b", learning, learning), None, None)
        await _refit_of(calibrator, "b", learnt)
        for route in ("a", "b"):
            calibrator.submit(_sample_of(route, learning + 1, learning), None, None)
        # and a burst on a, as many samples as make a refit due, right after its refit
        await _refit_of(calibrator, "a", len(calibrator.refits))
        for n in range(REFIT_SAMPLES):
            calibrator.submit(_sample_of("a", learning + 2 + n, learning), None, None)
        await calibrator.queue.join()
        await asyncio.sleep(3 * REFIT_GAP)
        for route in ("a", "b"):
            times = [t for r, t in calibrator.refits[learnt:] if r == route]
            assert len(times) >= 2, calibrator.refits[learnt:]
            gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
            assert min(gaps) >= REFIT_GAP, (route, gaps)
    finally:
        await calibrator.stop()


class _ReadBeforeWrite(SqliteStore):
    """The embedded store whose read of a route's samples answers what it held when the read
    began, once ``released``: a refresh whose read was under way while the writer stored the
    newest sample (on Redis, a round trip; here, made to happen)."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.reading = asyncio.Event()
        self.released = asyncio.Event()

    async def recent_samples(self, route: str, limit: int) -> list[Sample]:
        held = await super().recent_samples(route, limit)
        self.reading.set()
        await self.released.wait()
        return held


async def test_a_refresh_keeps_the_samples_written_while_it_read() -> None:
    """A refresh replaces the route's window with the store's and refits: the sample the
    writer added while that read was under way was not in what the read returned, and dropped
    out of the window and the correction until the next refresh (5 s later)."""
    policy = CalibrationPolicy()
    store = _ReadBeforeWrite()
    calibrator = Calibrator(store, Metrics(), policy, refresh_seconds=3600)
    calibrator.start({"r": True})
    try:
        learning = 2 * policy.min_samples
        for n in range(learning):
            calibrator.submit(_sample(n), None, None)
        await calibrator.queue.join()
        store.reading.clear()
        store.released.clear()
        refreshing = asyncio.ensure_future(calibrator.refresh())
        await store.reading.wait()
        calibrator.submit(_sample(learning, over=1.1), None, None)
        await calibrator.queue.join()
        store.released.set()
        await refreshing
        assert len(calibrator.routes["r"].samples) == learning + 1
        assert calibrator.correction("r").samples == learning + 1
    finally:
        await calibrator.stop()


async def test_a_refresh_goes_on_when_a_route_appears_while_it_reads() -> None:
    """A sample of a route no config named (the writer adds its window on the spot) that lands
    while a refresh reads the store: the refresh iterated the routes themselves, and stopped
    with 'dictionary changed size during iteration', logged, every refresh it met one."""
    store = _ReadBeforeWrite()
    calibrator = Calibrator(store, Metrics(), CalibrationPolicy(), refresh_seconds=3600)
    calibrator.start({"r": True, "s": True})
    try:
        await calibrator.queue.join()
        store.released.set()  # the refresher's own first refresh
        await asyncio.sleep(0)
        calibrator.submit(_sample(0), None, None)
        await calibrator.queue.join()
        store.reading.clear()
        store.released.clear()
        refreshing = asyncio.ensure_future(calibrator.refresh())
        await store.reading.wait()
        calibrator.submit(replace(_sample(1), route="new"), None, None)
        await calibrator.queue.join()
        store.released.set()
        await refreshing  # raised before
        assert set(calibrator.routes) == {"r", "s", "new"}
    finally:
        await calibrator.stop()


# -- the request path's pieces, in process (mutation testing found them reached only by e2e) --


def _anchor(actual: int) -> Anchor:
    return Anchor(text=actual - 40, framing=40, images=0, actual=actual)


def test_prefix_keys_chain_every_prefix_and_depend_on_route_model_and_tools() -> None:
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    keys = prefix_keys("r", "m", None, messages)
    assert len(keys) == 2 and len(set(keys)) == 2
    assert prefix_keys("r", "m", None, messages[:1]) == keys[:1]  # a prefix keeps its key
    assert prefix_keys("r", "m", None, messages) == keys  # and the same prompt its keys
    for other in (("s", "m", None), ("r", "n", None), ("r", "m", [{"name": "t"}])):
        assert set(prefix_keys(*other, messages)).isdisjoint(keys)
    assert prefix_keys("r", "m", None, [messages[1], messages[0]])[1] != keys[1]  # order counts


def test_the_anchor_memory_finds_the_first_live_candidate_and_forgets_the_oldest() -> None:
    cache = _AnchorCache(ttl=3600, maxsize=2)
    cache.put("r", b"a", _anchor(100))
    cache.put("r", b"b", _anchor(200))
    assert cache.find("r", [b"x", b"b", b"a"]) == (1, _anchor(200))
    assert cache.find("other", [b"a", b"b"]) is None  # per route
    assert cache.find("r", [b"a"]) == (0, _anchor(100))  # a is now the newest used
    cache.put("r", b"c", _anchor(300))  # over maxsize: b, the least recently used, goes
    assert cache.find("r", [b"b"]) is None
    assert cache.find("r", [b"a", b"c"]) == (0, _anchor(100))
    expired = _AnchorCache(ttl=-1.0)
    expired.put("r", b"a", _anchor(100))
    assert expired.find("r", [b"a"]) is None


async def test_an_anchor_submitted_is_found_in_memory_at_its_prefix() -> None:
    calibrator = Calibrator(SqliteStore(":memory:"), Metrics())
    keys = [b"k0", b"k1", b"k2"]
    assert await calibrator.find_anchor("r", []) is None
    assert await calibrator.find_anchor("r", keys) is None
    calibrator.submit(_sample(0), b"k1", _anchor(500), [(b"k0", _anchor(300))])
    assert await calibrator.find_anchor("r", keys) == (1, _anchor(500))  # the longest prefix
    assert await calibrator.find_anchor("r", keys[:1]) == (0, _anchor(300))
    report = calibrator.report()
    assert report["anchor_lookups"] == 3  # the empty key list is no lookup
    assert report["anchor_hit_rate"] == 2 / 3


def test_a_full_queue_drops_the_sample_and_counts_it() -> None:
    calibrator = Calibrator(SqliteStore(":memory:"), Metrics(), queue_size=1)
    calibrator.submit(_sample(0), None, None)
    calibrator.submit(_sample(1), None, None)
    calibrator.submit(_sample(2), None, None)
    assert calibrator.dropped == 2 and calibrator.queue.qsize() == 1
    report = calibrator.report()
    assert report["samples_dropped"] == 2 and report["samples_recorded"] == 0
    assert report["anchor_hit_rate"] == 0.0 and report["store"] == {"name": "sqlite", "up": True}


def test_a_routes_summary_reads_its_errors_as_percentiles() -> None:
    samples = [
        replace(_sample(0), estimate=900 + n, actual=1000, anchored=n % 4 == 0) for n in range(100)
    ]
    summary = summarize(samples, Correction())
    assert summary["samples"] == 100 and summary["anchored_share"] == 0.25
    assert summary["relative_error"] == {"p05": -0.095, "p50": -0.05, "p95": -0.005, "max": -0.001}
    assert summary["factors"] == {"text": 1.0, "framing": 1.0, "images": 1.0}
    two = summarize(
        [replace(_sample(0), estimate=e, actual=1000) for e in (900, 1100)], Correction()
    )
    assert two["relative_error"] == {"p05": -0.1, "p50": 0.1, "p95": 0.1, "max": 0.1}
    empty = summarize([], Correction())
    assert empty["relative_error"] is None and empty["anchored_share"] == 0.0
    unmeasured = summarize([replace(_sample(0), actual=0)], Correction())
    assert unmeasured["relative_error"] is None  # no provider count: no error to read
    assert not summary["provisional"]
    assert summarize([], fit_correction((), exact=False))["provisional"]  # a new route's prior
    assert summary["interval"] == 0.0  # no doubt on the meter's own weights


def test_a_routes_summary_says_what_its_interval_adds() -> None:
    """The median over the window of what a request's estimate adds for the weights' doubt,
    relative to their price: 5% of a text-only sample's tokens here."""
    n = len(FEATURES)
    row = tuple(0.05 if j == 0 else 0.0 for j in range(n))
    doubting = Correction(samples=30, weights=(1.0,) * n, interval=(row,))
    samples = [
        replace(_sample(0), features=tuple(t if j == 0 else 0 for j in range(n)), actual=t)
        for t in (500, 1000, 2000)
    ]
    assert summarize(samples, doubting)["interval"] == pytest.approx(0.05)


ROUTE = Route(
    alias="r",
    model="openai/gpt-4o",
    provider="openai",
    context_window=100_000,
    max_output_tokens=1024,
    tokenizer="o200k_base",
    framing=Framing(family="generic"),
)


def _pressure(turns: int) -> tuple[list[dict[str, str]], Pressure]:
    messages = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " * 400}
        for n in range(turns)
    ]
    request = parse_request({"model": "r", "messages": messages})
    return messages, fit(request, ROUTE, FitPolicy()).pressure


async def test_an_observed_count_is_a_sample_and_anchors_its_prompt_and_checkpoints() -> None:
    calibrator = Calibrator(SqliteStore(":memory:"), Metrics())
    messages, pressure = _pressure(12)
    keys = prefix_keys("r", "gpt-4o", None, messages)
    calibrator.observe("r", pressure, keys, 5000, False, 5200, 64)
    sample, key, anchor, extra = calibrator.queue.get_nowait()
    assert (sample.route, sample.estimate, sample.actual, sample.anchored) == (
        "r",
        5000,
        5200,
        False,
    )
    assert sample.cached == 64
    assert key == keys[-1] and anchor == anchor_of(pressure, 5200)
    checkpoints = checkpoint_anchors(pressure, 5200, calibrator.correction("r"))
    assert checkpoints and list(extra) == [(keys[n - 1], a) for n, a in checkpoints]
    assert await calibrator.find_anchor("r", keys) == (len(keys) - 1, anchor)
    n, first = checkpoints[0]
    assert await calibrator.find_anchor("r", keys[:n]) == (n - 1, first)
    # keys that do not match the prompt's messages: the sample alone, no anchor
    calibrator.observe("r", pressure, keys[:-1], 5000, True, 5200)
    sample, key, anchor, extra = calibrator.queue.get_nowait()
    assert sample.anchored and sample.cached == 0 and (key, anchor, extra) == (None, None, ())
    calibrator.observe("r", pressure, [], 5000, False, 5200)
    assert calibrator.queue.get_nowait()[1:] == (None, None, ())


async def test_a_route_learnt_to_cost_less_per_request_anchors_no_tiny_first_message() -> None:
    """Honest samples of a provider that adds 6 tokens less framing per request than the meter
    fit a negative weight per request: the head alone (priming, the request) is priced under 0.
    A first message of a few tokens was then a checkpoint, its share of the count 0 (the lookup
    refused it as absurd: Gemini sessions that began alike, ~100 in 300) or a few tokens (a new
    session anchored on it was priced without its interval)."""
    from pricing.meter import MessagePressure

    n = len(FEATURES)
    at = {k: FEATURES.index(k) for k in ("prose", "framing", "messages", "requests")}
    samples = []
    for i in range(60):
        m, t = 1 + i % 6, 3 + (i * 67) % 400
        v = [0] * n
        v[at["prose"]], v[at["framing"]], v[at["messages"]], v[at["requests"]] = t, 3 + 4 * m, m, 1
        samples.append(Sample("r", float(i), t, 3 + 4 * m, 0, 0, m, 0, False, t + 4 * m - 3,
                              0, tuple(v)))  # fmt: skip
    calibrator = Calibrator(SqliteStore(":memory:"), Metrics())
    calibrator.track({"r": False})
    calibrator.routes["r"].correction = learnt = fit_correction(samples, exact=False)
    head = [0] * n
    head[at["framing"]], head[at["requests"]] = 3, 1
    assert learnt.price(head) < 0
    first = MessagePressure(0, "user", 3, 4, 0, (3, 0, 0, 0, 0))
    rest = tuple(MessagePressure(i, "user", 400, 4, 0, (400, 0, 0, 0, 0)) for i in range(1, 8))
    pressure = Pressure("r", (first, *rest), tools=0, priming=3, image_details=(), exact=False)
    keys = [bytes([i]) * 16 for i in range(8)]
    calibrator.observe("r", pressure, keys, 3000, False, 2850)
    _, _, _, extra = calibrator.queue.get_nowait()
    assert extra and all(a.actual >= 512 * 2850 // 3300 for _, a in extra)
    assert await calibrator.find_anchor("r", keys[:1]) is None


async def test_a_head_before_an_image_of_unknown_size_is_never_anchored_under_its_count() -> None:
    """A system prompt, then a URL image of unknown size: priced at its rule's worst case (1,445
    tokens on gpt-4o), counted by the provider at its size (255 for 512x512). The system prompt
    crossed the first step, and its share of the count was taken over the whole price, the
    image's worst case included: 259 tokens for a head of 612, and a new session that began
    with it was priced from them, ~350 under its count. The prompt's own anchor is exact."""
    route = replace(ROUTE, image_rule=default_image_rule("gpt-4o", True), supports_vision=True)

    def measured(messages: list[dict]) -> Pressure:
        return fit(parse_request({"model": "r", "messages": messages}), route, FitPolicy()).pressure

    calibrator = Calibrator(SqliteStore(":memory:"), Metrics())
    system = {"role": "system", "content": "You review photos. " + "word " * 600}
    image = {"url": "https://images.example/a.png", "detail": "high"}
    photo = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": image}]
    sent = [system, {"role": "user", "content": photo}]
    pressure = measured(sent)
    assert pressure.messages[1].unsized == pressure.messages[1].images == 1445
    actual = pressure.total - 1445 + 255  # the meter is exact for the text (uniform bias 1)
    calibrator.observe("r", pressure, prefix_keys("r", "gpt-4o", None, sent), 2065, False, actual)
    correction = calibrator.correction("r")

    async def priced(messages: list[dict]) -> tuple[int, int]:
        p = measured(messages)
        hit = await calibrator.find_anchor("r", prefix_keys("r", "gpt-4o", None, messages))
        estimate = (
            correction.price_request(p) if hit is None else anchored_estimate(hit[1], p, correction)
        )
        return estimate, p.total  # a text-only prompt's count is the meter's

    question = {"role": "user", "content": "Summarise your rules in one line."}
    estimate, truth = await priced([system, question])
    assert estimate >= truth, (estimate, truth)
    # the session's next turn starts from the provider's count of the prompt as sent
    reply = {"role": "assistant", "content": "A cat on a mat."}
    turn = [*sent, reply, question]
    estimate, _ = await priced(turn)
    added = measured(turn).total - pressure.total
    assert estimate == actual + added


async def test_a_shared_store_answers_for_anchors_another_replica_wrote(redis_url: str) -> None:
    writer_store, reader_store = RedisStore(redis_url), RedisStore(redis_url)
    writer = Calibrator(writer_store, Metrics(), refresh_seconds=3600)
    metrics = Metrics()
    reader = Calibrator(reader_store, metrics, refresh_seconds=3600)
    route = "shared-" + uuid.uuid4().hex[:8]
    writer.start({route: True})
    try:
        writer.submit(replace(_sample(0), route=route), b"k1", _anchor(700))
        await writer.queue.join()
        assert await reader.find_anchor(route, [b"k0", b"k1", b"k2"]) == (1, _anchor(700))
        assert await reader.find_anchor(route, [b"k9"]) is None
        assert _lookups(metrics) == {"hit": 1, "miss": 1}
    finally:
        await writer.stop()
        await writer_store.close()
        await reader_store.close()


async def test_a_store_away_is_logged_once_and_its_return_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="routefit.calibration")
    metrics = Metrics()
    with private_redis() as server:
        store = RedisStore(server.url, timeout=0.2)
        calibrator = Calibrator(store, metrics, refresh_seconds=3600)
        calibrator.start({"r": True})
        try:
            await calibrator.queue.join()
            server.kill()
            for _ in range(2):
                assert await calibrator.find_anchor("r", [b"k"]) is None
            # the first fails; the next do not ask a store known to be away
            assert not calibrator.store_up and _lookups(metrics) == {"error": 1, "miss": 1}
            assert calibrator.report()["store"] == {"name": "redis", "up": False}
            server.start()
            await calibrator.refresh()
            assert calibrator.store_up
        finally:
            await calibrator.stop()
            await store.close()
    assert [r.getMessage() for r in caplog.records] == [
        "store redis unavailable (anchor lookup); serving with the last known calibration",
        "store redis is back; calibration resumes",
    ]


def _lookups(metrics: Metrics) -> dict[str, float]:
    return {
        s.labels["outcome"]: s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "routefit_anchor_lookups_total" and s.value
    }


async def test_samples_and_anchors_reach_the_store_and_another_replica_learns_them(
    redis_url: str,
) -> None:
    route = "learnt-" + uuid.uuid4().hex[:8]
    stores = RedisStore(redis_url), RedisStore(redis_url)
    metrics = Metrics()
    writer = Calibrator(stores[0], metrics, refresh_seconds=3600)
    reader = Calibrator(stores[1], Metrics(), refresh_seconds=3600)
    count = 2 * CalibrationPolicy().min_samples
    writer.start({route: True})
    try:
        for n in range(count):
            sample = replace(_sample(n), route=route)
            writer.submit(sample, f"k{n}".encode(), _anchor(1000 + n), [(b"x", _anchor(7))])
        await writer.queue.join()
        assert writer.recorded == count and writer.report()["samples_recorded"] == count
        assert _samples(metrics) == {"recorded": count}
        assert len(await stores[1].recent_samples(route, 1000)) == count
        assert await stores[1].find_anchor(route, [b"k3"]) == (0, _anchor(1003))
        assert await stores[1].find_anchor(route, [b"x"]) == (0, _anchor(7))
        reader.routes[route] = _Route(deque(maxlen=CalibrationPolicy().window), Correction())
        await reader.refresh()
        assert reader.correction(route).samples == count
        assert reader.report()["routes"][route]["samples"] == count
    finally:
        await writer.stop()
        for store in stores:
            await store.close()


async def test_the_embedded_store_keeps_samples_but_no_anchor_no_one_reads(tmp_path: Path) -> None:
    # Only a shared store is asked for anchors (``Store.shared``); the embedded one is not, so
    # the writer leaves them out of its batches: the samples land, the anchors stay in memory.
    store = SqliteStore(str(tmp_path / "s.sqlite3"))
    writer = Calibrator(store, Metrics(), refresh_seconds=3600)
    count = 3
    writer.start({"r": True})
    try:
        for n in range(count):
            writer.submit(_sample(n), f"k{n}".encode(), _anchor(1000 + n), [(b"x", _anchor(7))])
        await writer.queue.join()
        assert writer.recorded == count
        assert len(await store.recent_samples("r", 1000)) == count
        assert await store.find_anchor("r", [b"k1", b"x"]) is None
        assert await writer.find_anchor("r", [b"k1"]) == (0, _anchor(1001))
    finally:
        await writer.stop()
        await store.close()


def _samples(metrics: Metrics) -> dict[str, float]:
    return {
        s.labels["outcome"]: s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "routefit_calibration_samples_total" and s.value
    }
