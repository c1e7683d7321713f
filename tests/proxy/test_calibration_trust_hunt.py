"""Calibration takes nothing on faith: a provider's count that no tokenizer could give, and a
store's record that no version of routefit wrote, teach nothing (docs/calibration.md,
"Implausible counts" and "Replicas and outages").

* Through the in-process gateway and the simulator (its ``lie-usage`` fault): a usage within its
  own bounds (a count in [0, window]) but absurd for the prompt — 1 token for a thousand, or
  nearly the whole window for a thousand — was the prompt's anchor, and the next turn was
  priced from it: 6x under the provider's count, or over the window (cut or refused).
* Pure: the plausibility rule keeps the honest extremes (a script one meter reads in four
  times the other's tokens, a token per UTF-8 byte) and refuses the absurd.
* A store holding a sample with a figure that is not a count (an older version's, a corrupted
  record) failed every refit of its route, the writer's too, so that the route never learnt
  again; an anchor with such figures failed the request it was found for.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import gateway_config, sim_route
from inprocess import InProcess, run_inprocess
from script_sentences import SCRIPTS

from pricing.calibration import (
    Anchor,
    CalibrationPolicy,
    Correction,
    Sample,
    fit_correction,
    implausible_count,
    pressure_features,
)
from pricing.messages import parse_request
from pricing.meter import measure
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from proxy.calibrator import Calibrator
from proxy.metrics import Metrics
from proxy.sim.server import SimServer
from proxy.store.redis import RedisStore
from proxy.store.sqlite import SqliteStore

ADMIN = "sk-admin-" + uuid.uuid4().hex
KEY = "sk-a-" + uuid.uuid4().hex
WINDOW = 8192


@pytest.fixture(scope="module")
def gw(sim: SimServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    info = {"max_input_tokens": WINDOW, "max_output_tokens": 1024}
    routes = [
        sim_route("exact", sim.base_url, "gpt-4o", model_info=info),  # o200k: an exact meter
        sim_route("unknown", sim.base_url, "mystery-1", model_info=info),  # learnt
    ]
    config = gateway_config(
        tmp_path_factory.mktemp("trust-hunt") / "c.yaml",
        routes,
        admin_key=ADMIN,
        teams=[{"id": "team-a", "keys": [KEY]}],
    )
    with run_inprocess(config) as running:
        yield running


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _rejected(gw: InProcess) -> int:
    r = httpx.get(gw.base_url + "/routefit/calibration", headers=_auth(ADMIN))
    return int(r.json()["samples_rejected"])


def _lie_next(sim: SimServer, model: str, value: int) -> None:
    rule = {"fault": f"lie-usage:{value}", "model": model, "count": 1}
    httpx.post(sim.url("/sim/faults"), json={"faults": [rule]}).raise_for_status()


def _chat(gw: InProcess, alias: str, messages: list[dict[str, str]]) -> httpx.Response:
    body = {"model": alias, "messages": messages, "max_tokens": 50}
    r = httpx.post(gw.v1 + "/chat/completions", json=body, headers=_auth(KEY), timeout=60)
    assert r.status_code == 200, r.text
    return r


def _dry_run(gw: InProcess, alias: str, messages: list[dict[str, str]]) -> httpx.Response:
    body = {"model": alias, "messages": messages, "max_tokens": 50}
    r = httpx.post(gw.base_url + "/routefit/fit", json=body, headers=_auth(KEY), timeout=60)
    assert r.status_code == 200, r.text
    return r


def _wait(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize(("alias", "model"), [("exact", "gpt-4o"), ("unknown", "mystery-1")])
@pytest.mark.parametrize("lie", ["one token", "nearly the window"])
def test_an_absurd_count_within_bounds_is_neither_sample_nor_anchor(
    gw: InProcess, sim: SimServer, alias: str, model: str, lie: str
) -> None:
    first = [{"role": "user", "content": "hello world " * 500 + uuid.uuid4().hex}]
    told = 1 if lie == "one token" else WINDOW - 200  # both within [0, window + output]
    rejected = _rejected(gw)
    _lie_next(sim, model, told)
    r = _chat(gw, alias, first)
    assert r.json()["usage"]["prompt_tokens"] == told  # the simulator did lie
    assert _wait(lambda: _rejected(gw) == rejected + 1)
    # The next turn: priced by routefit, not from the lie (before: anchored on it, 211 tokens for
    # a prompt of 1,236, or 7,210 of the 8,192 window for the same prompt).
    turn = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    dry = _dry_run(gw, alias, turn)
    assert dry.headers["x-routefit-prompt-tokens-kind"] != "anchored"
    estimate = int(dry.headers["x-routefit-prompt-tokens"])
    truth = _chat(gw, alias, turn).json()["usage"]["prompt_tokens"]  # honest now
    assert truth <= estimate < 2 * truth
    assert "provider count rejected" in gw.log()


# -- the rule, pure ---------------------------------------------------------------------------

_POLICY = CalibrationPolicy()


def _features(text: str, meter: str) -> tuple[int, ...]:
    route = Route(alias="unknown", model="acme-7", tokenizer=meter)
    body = {"model": "unknown", "messages": [{"role": "user", "content": text}]}
    return pressure_features(measure(parse_request(body), route))


@pytest.mark.parametrize("script", ["hindi", "arabic", "chinese", "thai", "russian"])
def test_honest_extremes_of_a_script_are_plausible(script: str) -> None:
    text = SCRIPTS[script]
    o200k = get_tokenizer("o200k_base").count(text)
    # a cl100k meter, a tokenizer of the stated family a quarter cheaper than o200k (Hindi: a
    # fifth of the meter's count)
    cheap = _features(text, "cl100k_base")
    prior = fit_correction((), _POLICY, False, "cl100k_base")
    assert implausible_count(cheap, max(1, o200k * 3 // 4), prior, _POLICY) is None
    # an o200k meter, a tokenizer with no piece for the script: a token per UTF-8 byte
    dear = _features(text, "o200k_base")
    prior = fit_correction((), _POLICY, False, "o200k_base")
    assert implausible_count(dear, len(text.encode()), prior, _POLICY) is None


def test_a_count_no_tokenizer_gives_is_named() -> None:
    text = "the route counts tokens window provider answer session history plan file " * 40
    features = _features(text, "o200k_base")
    meter = Correction().price(features)
    prior = fit_correction((), _POLICY, False)
    most = prior.price(features)
    for told in (1, meter // 10, 5 * most, 10**6):
        assert implausible_count(features, told, prior, _POLICY) is not None, told
    for told in (meter // 2, meter, most, 2 * most):
        assert implausible_count(features, told, prior, _POLICY) is None, told


# -- what a store holds -----------------------------------------------------------------------


def _sample(n: int) -> Sample:
    return Sample("r", time.time(), 1000 + 37 * n, 40, 0, 0, 3, 1040 + 37 * n, False, 1100 + 41 * n)


_UNREADABLE: list[dict[str, Any]] = [
    {"text": "1000"},  # a string: every refit raised TypeError
    {"anchored": "yes"},
    {"estimate": "x"},
    {"actual": 1.5e300},  # a float far beyond any count
    {"features": (2**50,) * 24},  # beyond any count (a store holds 64 bits)
    {"cached": -5},
    {"message_count": "3"},
]


@pytest.mark.anyio
@pytest.mark.parametrize("bad", _UNREADABLE, ids=lambda b: next(iter(b)))
async def test_a_stored_sample_that_is_not_counts_is_skipped_and_the_route_learns_on(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    store = SqliteStore(str(tmp_path / "s.sqlite3"))
    good = [_sample(n) for n in range(20)]
    # an older version (or a corrupted record) wrote it: the store keeps what it is given
    await store.record_batch([*good[:10], replace(_sample(10), **bad), *good[10:]], [], 60)
    calibrator = Calibrator(store, Metrics(), refresh_seconds=3600)
    calibrator.start({"r": True})
    try:
        await calibrator.refresh()
        assert calibrator.correction("r") == fit_correction(good)
        calibrator.submit(_sample(21), None, None)  # the writer refits on it, and records it
        await asyncio.wait_for(calibrator.queue.join(), 10)
        assert calibrator.recorded == 1 and calibrator.dropped == 0
        assert calibrator.report()["routes"]["r"]["samples"] == 21
    finally:
        await calibrator.stop()
        await store.close()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "bad",
    [
        Anchor("1000", 40, 0, 1100),  # type: ignore[arg-type]  # as a corrupted record decodes
        Anchor(1000, 40, 0, 0),
        Anchor(1000, 40, 0, -5),
        Anchor(1000, 40, 0, 1100, (1, "x")),  # type: ignore[arg-type]
    ],
)
async def test_a_stored_anchor_that_is_not_counts_is_a_miss(redis_url: str, bad: Anchor) -> None:
    store = RedisStore(redis_url)
    route = "r-" + uuid.uuid4().hex[:8]
    calibrator = Calibrator(store, Metrics(), refresh_seconds=3600)
    try:
        await store.put_anchor(route, b"bad", bad, 60)
        good = Anchor(900, 40, 0, 1000)
        await store.put_anchor(route, b"good", good, 60)
        # the longer prefix's anchor is the bad one: a miss, or the shorter one's — never it
        assert await calibrator.find_anchor(route, [b"good", b"bad"]) in (None, (0, good))
        assert await calibrator.find_anchor(route, [b"good"]) == (0, good)
    finally:
        await store.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
