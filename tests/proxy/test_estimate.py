"""The estimator's contract, in-process on the embedded store with the route's real tokenizer:
its answers are values (the exact count and a refit give new estimates and leave the one the
gateway held as it was), a refit prices the prompt at no less than the provider's own count and
cuts it to the budget, and a figure routefit must not believe or cannot pair with exact figures
teaches nothing. The path through ``routefit serve`` is tests/proxy/test_bounded_e2e.py and
test_overflow_refit_e2e.py."""

from __future__ import annotations

import random
from dataclasses import replace

import orjson
import pytest

from pricing.calibration import FEATURES, Correction
from proxy.calibrator import Calibrator
from proxy.config import parse_config
from proxy.errors import ProxyError
from proxy.estimate import Estimate, Estimator, Job
from proxy.fetch import ImageSizer
from proxy.metrics import Metrics
from proxy.pace import Pace
from proxy.store.sqlite import SqliteStore
from proxy.usage import Usage
from proxy.wires import CHAT_WIRE
from proxy.wires.base import RequestContext

pytestmark = pytest.mark.anyio

WINDOW = 128_000
CONFIG = parse_config(
    {
        "model_list": [
            {
                "model_name": "m",
                "litellm_params": {"model": "openai/gpt-4o", "api_base": "http://x"},
                "model_info": {"max_input_tokens": WINDOW, "max_output_tokens": 4096},
            }
        ]
    }
)
WORDS = "the route counts tokens window provider answer session history plan file".split()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _body(turns: int = 12, words: int = 230) -> bytes:
    """A session of ~20 KB: over the size that is proved by a bound, far under the window."""
    rng = random.Random(7)
    messages = [{"role": "system", "content": "You are a careful assistant."}]
    for _ in range(turns):
        for role in ("user", "assistant"):
            messages.append({"role": role, "content": " ".join(rng.choices(WORDS, k=words))})
    messages.append({"role": "user", "content": "And now?"})
    return orjson.dumps({"model": "m", "messages": messages})


async def _estimated(estimator: Estimator, bound: bool) -> Estimate:
    body = _body()
    parsed = CHAT_WIRE.parse(_context(body))
    rc = CONFIG.routes["m"]
    return await estimator.estimate(
        CHAT_WIRE, parsed, rc, None, "addr:test", len(body), 0.0, bound=bound
    )


def _doubting() -> Correction:
    """A learnt inexact route's correction with an interval (5% of the prose's tokens)."""
    n = len(FEATURES)
    row = tuple(0.05 if name == "prose" else 0.0 for name in FEATURES)
    return Correction(samples=30, weights=(1.1,) * n, interval=(row,))


@pytest.mark.parametrize("learnt", [False, True])
async def test_a_count_answers_what_the_fit_prices(learnt: bool) -> None:
    """``count_tokens`` answers the estimate the fit acts on (docs/architecture.md), on a
    route the calibrator prices by an inexact meter's prior (a correction, not the identity),
    or by weights it learnt with the request's interval (the estimate is above their price)."""
    estimator, calibrator = _estimator()
    calibrator.start({"m": False})
    if learnt:
        calibrator.routes["m"].correction = _doubting()
    try:
        counted = await _estimated(estimator, bound=False)
        body = _body()
        parsed = CHAT_WIRE.parse(_context(body))
        tokens = await estimator.count(
            CHAT_WIRE, parsed, CONFIG.routes["m"], None, "addr:test", len(body)
        )
    finally:
        await calibrator.stop()
    assert tokens == counted.fitted.report.estimate_before == counted.tokens
    if learnt:
        assert tokens > _doubting().price_pressure(counted.fitted.pressure)


def _estimator() -> tuple[Estimator, Calibrator]:
    metrics = Metrics()
    calibrator = Calibrator(SqliteStore(":memory:"), metrics)
    return Estimator(CONFIG, calibrator, ImageSizer(), metrics), calibrator


async def test_exact_and_refit_answer_new_estimates_and_leave_the_held_one() -> None:
    """The gateway's path on an overflow: a bounded estimate, its exact count, then the
    provider's count of what was sent (over the window) and the refit."""
    estimator, calibrator = _estimator()
    bounded = await _estimated(estimator, bound=True)
    assert bounded.bound and bounded.counting is not None  # the proof let it go
    held = (bounded.fitted, bounded.tokens, bounded.keys, bounded.counting)

    exact = await estimator.exact(bounded)
    assert exact is not bounded and not exact.bound and exact.counting is None
    assert exact.tokens <= bounded.tokens  # a bound is never below the figure it stands for
    assert (bounded.fitted, bounded.tokens, bounded.keys, bounded.counting) == held
    assert bounded.bound
    assert await estimator.exact(exact) is exact

    budget = exact.fitted.report.budget
    counted = budget + 1000  # the provider: the prompt as sent is over its window
    before = (exact.fitted, exact.tokens, exact.keys, exact.anchored)
    refitted = await estimator.refit(exact, counted)
    assert refitted is not None and refitted is not exact
    assert (exact.fitted, exact.tokens, exact.keys, exact.anchored) == before
    assert refitted.job is exact.job
    # the same prompt priced again at no less than the provider said, then cut to the budget
    report = refitted.fitted.report
    assert report.estimate_before >= counted
    assert report.actions["elided_messages"].count > 0
    # acted on: no less than the refit's own figure (its tail priced by the raised weights)
    assert report.estimate_after <= refitted.tokens <= report.budget == budget
    # the provider's count, 22x the meter's of the prompt sent, is no tokenizer's: the refit
    # goes on, but nothing is learnt from it (``pricing.calibration.implausible_count``)
    assert calibrator.queue.qsize() == 0 and calibrator.rejected == 1


async def test_a_count_only_for_learning_is_paced_and_a_needed_one_never() -> None:
    """A bound's exact count is only for learning: it is begun beside the forward when the
    counts before it have had no more than their share of the CPU (``proxy.pace``); else it is
    not, and after the answer (``needed`` False) the request stays a bound, which teaches
    nothing. A count the request needs (a refit after the provider's refusal) is begun then,
    whatever the pace."""
    estimator, calibrator = _estimator()
    now = [100.0]
    estimator.pace = Pace(0.25, clock=lambda: now[0])
    first = await _estimated(estimator, bound=True)
    assert first.counting is not None  # the pace was free: begun beside the forward
    assert not (await estimator.exact(first, needed=False)).bound
    second = await _estimated(estimator, bound=True)
    assert second.counting is None and second.later is not None  # its share is not over
    dropped = await estimator.exact(second, needed=False)
    assert dropped is second  # not counted: still a bound, its count still to begin if needed
    estimator.learn(dropped, Usage(dropped.tokens, 1))
    assert calibrator.queue.qsize() == 0  # a bound teaches nothing
    needed = await estimator.exact(second)
    assert not needed.bound and needed.tokens <= second.tokens
    now[0] += 60.0
    assert (await _estimated(estimator, bound=True)).counting is not None
    counts = estimator.metrics.learning_counts
    assert counts.labels("m", "counted")._value.get() == 2
    assert counts.labels("m", "skipped")._value.get() == 1


async def test_figures_not_to_be_believed_or_paired_teach_nothing() -> None:
    estimator, calibrator = _estimator()
    counted = await _estimated(estimator, bound=False)
    assert not counted.bound and counted.counting is None
    over = counted.fitted.report.budget + 1000

    # not an under-estimate of routefit's: the provider's refusal stands
    assert await estimator.refit(counted, counted.tokens) is None
    # a count beyond twice the window is not believed
    assert await estimator.refit(counted, 2 * WINDOW + 1) is None
    assert calibrator.rejected == 1
    # a bound whose exact count failed has no exact figures to pair with the provider's
    failed = replace(counted, bound=True)
    assert await estimator.refit(failed, over) is None
    estimator.learn(failed, Usage(counted.tokens + 10, 5))
    assert calibrator.queue.qsize() == 0

    estimator.learn(counted, Usage(counted.tokens + 10, 5))
    assert calibrator.queue.qsize() == 1


def _context(body: bytes) -> RequestContext:
    """The body as the intake hands it to a wire (open mode: no team)."""
    return RequestContext(orjson.loads(body), {}, {}, {}, None, size=len(body))


SMALL = parse_config(
    {
        "model_list": [
            {
                "model_name": "s",
                "litellm_params": {"model": "openai/acme-7", "api_base": "http://x"},
                "model_info": {"max_input_tokens": 4000, "max_output_tokens": 256},
            }
        ]
    }
)


def _job(words: int) -> Job:
    """A one-message request of about ``words`` tokens to a 4,000-token route."""
    rng = random.Random(words)
    text = " ".join(rng.choices(WORDS, k=words))
    body = orjson.dumps({"model": "s", "messages": [{"role": "user", "content": text}]})
    rc = SMALL.routes["s"]
    return Job(CHAT_WIRE, CHAT_WIRE.parse(_context(body)), rc, rc.policy, {}, rc.route)


def test_a_doubt_is_no_grounds_for_a_refusal() -> None:
    """The interval errs high on purpose, like a prior: a latest user message whose estimate
    with it is over the budget, and by the weights alone under it, is forwarded (the provider
    judges, and its count is learnt); one the weights alone put over the budget is refused."""
    n = len(FEATURES)
    doubting = Correction(samples=30, weights=(1.0,) * n, interval=(tuple([0.6] * n),))
    fits = _job(2600)
    plain = fits.fit(replace(doubting, interval=()))
    budget = plain.report.budget
    assert doubting.price_request(plain.pressure) > budget  # the interval alone would refuse it
    fitted = fits.fit(doubting)
    assert fitted.report.transparent and fitted.estimate <= budget
    with pytest.raises(ProxyError) as refused:
        _job(5000).fit(doubting)
    assert refused.value.status == 400
