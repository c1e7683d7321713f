"""Calibration end to end: a route whose true tokenizer routefit does not know (the simulator's
mystery-1: o200k x 1.11 plus 6 tokens per message), estimates converging on the provider's usage,
anchors in multi-turn sessions, replicas sharing Redis, restarts, and a Redis outage."""

from __future__ import annotations

import math
import os
import random
import subprocess
import time
import uuid
import zlib

import httpx
import openai
import pytest
from harness import gateway_config, routefit_command, run_routefit, sim_route
from harness import private_redis as harness_private_redis
from inprocess import run_inprocess

from proxy import calibrator

VOCABULARY = (
    "alpha beta gamma delta epsilon tokens window provider usage estimate route calibration "
    "anchor 42 1999 {json: true} naïve café 東京 🚀"
)
WORDS = VOCABULARY.split(" ")


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def conversation(rng: random.Random) -> list[dict]:
    messages = [{"role": "system", "content": "You are helpful. " + text(rng, rng.randint(5, 60))}]
    for _ in range(rng.randint(0, 6)):
        messages.append({"role": "user", "content": text(rng, rng.randint(3, 300))})
        messages.append({"role": "assistant", "content": text(rng, rng.randint(3, 200))})
    messages.append({"role": "user", "content": text(rng, rng.randint(3, 400))})
    return messages


def mystery_route(url: str, alias: str) -> dict:
    return sim_route(
        alias, url, "mystery-1", model_info={"max_input_tokens": 32768, "max_output_tokens": 4096}
    )


def ask(client: openai.OpenAI, alias: str, messages: list[dict]) -> tuple[int, int, bool]:
    raw = client.chat.completions.with_raw_response.create(
        model=alias, messages=messages, max_tokens=64
    )
    usage = raw.parse().usage
    return int(raw.headers["x-routefit-prompt-tokens"]), usage.prompt_tokens, raw.parse()


@pytest.fixture
def refit_each_sample(monkeypatch: pytest.MonkeyPatch) -> dict:
    """What these tests measure is the model: each request priced by the fit of every sample
    before it. The server refits a learnt route on a clock (at most every ``REFIT_GAP``, longer
    when a fit is slow; once 16 samples or ``REFIT_SECONDS`` have gathered) and refits from the
    store every ``refresh_seconds``, so which samples a request's correction had seen hung on the
    machine's speed: one run under a loaded CI priced a request 1.05% under the provider's count
    where an idle run priced the same request 0.07% under. Here the gateway refits on every
    sample the correction misprices and never refreshes (one replica: the store holds only what
    it wrote), so the same samples give the same estimates; the clock is
    tests/proxy/test_calibrator.py's. Returns the settings that turn the refresh off."""
    monkeypatch.setattr(calibrator, "REFIT_GAP", 0.0)
    monkeypatch.setattr(calibrator, "REFIT_SECONDS", 0.0)
    monkeypatch.setattr(calibrator, "REFIT_SHARE", math.inf)
    return {"calibration": {"refresh_seconds": 10**6}}


def settle_samples(base_url: str, alias: str, count: int, timeout: float = 10.0) -> dict:
    """Wait until the background writer has recorded ``count`` samples for the route."""
    deadline = time.monotonic() + timeout
    while True:
        report = httpx.get(base_url + "/routefit/calibration").json()
        route = report["routes"].get(alias, {})
        if route.get("samples", 0) >= count or time.monotonic() > deadline:
            return report
        time.sleep(0.05)


def test_estimates_converge_on_an_unknown_tokenizer(sim, tmp_path, refit_each_sample):
    alias = "mystery"
    config = gateway_config(
        tmp_path / "c.yaml",
        [mystery_route(sim.base_url, alias)],
        exact_prompt_headers=True,
        **refit_each_sample,
    )
    rng = random.Random(7)
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        errors = []
        for i in range(70):
            estimate, actual, _ = ask(client, alias, conversation(rng))
            errors.append((estimate - actual) / actual)
            settle_samples(gw.base_url, alias, i + 1)
        factors = httpx.get(gw.base_url + "/routefit/calibration").json()["routes"][alias]
        later = errors[30:]
    # It learnt that this provider's tokenizer counts ~11% more than o200k_base.
    assert 1.05 < factors["factors"]["text"] < 1.2
    # After 30 requests: |error| <= 3% at p95, and underestimates no worse than 1%.
    p95 = sorted(abs(e) for e in later)[int(0.95 * len(later))]
    assert p95 <= 0.03, (p95, later)
    assert min(later) >= -0.01, later


def test_anchored_multi_turn_sessions_are_within_one_percent(sim, tmp_path, refit_each_sample):
    alias = "mystery"
    config = gateway_config(
        tmp_path / "c.yaml",
        [mystery_route(sim.base_url, alias)],
        exact_prompt_headers=True,
        **refit_each_sample,
    )
    rng = random.Random(11)
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        messages = [{"role": "system", "content": "You are a careful assistant."}]
        anchored_errors = []
        for turn in range(25):
            messages.append({"role": "user", "content": text(rng, rng.randint(20, 300))})
            estimate, actual, reply = ask(client, alias, messages)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            if turn >= 2:  # from the third turn on, the previous turn is an anchor
                anchored_errors.append((estimate - actual) / actual)
            settle_samples(gw.base_url, alias, turn + 1)
        report = httpx.get(gw.base_url + "/routefit/calibration").json()
    # Before calibration has samples the increment is estimated with the conservative prior;
    # once it has, the anchored estimate is within 1% (and never more than 1% under).
    assert max(abs(e) for e in anchored_errors[8:]) <= 0.01, anchored_errors
    assert min(anchored_errors) >= -0.03, anchored_errors
    assert report["anchor_hit_rate"] > 0.8
    assert report["routes"][alias]["anchored_share"] > 0.8


def test_two_replicas_share_redis_and_converge_and_a_restart_keeps_it(sim, tmp_path, redis_url):
    alias = f"mystery-{uuid.uuid4().hex[:8]}"  # fresh keys on a shared Redis
    config = gateway_config(
        tmp_path / "c.yaml",
        [mystery_route(sim.base_url, alias)],
        redis_url=redis_url,
        calibration={"refresh_seconds": 0.5},
    )
    rng = random.Random(3)
    # Replicas as separate processes: what they share must go through Redis.
    with run_routefit(config) as a, run_routefit(config) as b:
        clients = [openai.OpenAI(base_url=g.v1, api_key="x", max_retries=0) for g in (a, b)]
        for i in range(30):
            ask(clients[i % 2], alias, conversation(rng))
        deadline = time.monotonic() + 10
        while True:
            ra = httpx.get(a.base_url + "/routefit/calibration").json()["routes"][alias]
            rb = httpx.get(b.base_url + "/routefit/calibration").json()["routes"][alias]
            if ra["samples"] == rb["samples"] == 30 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert ra["samples"] == rb["samples"] == 30
        assert ra["factors"] == rb["factors"]
        assert ra["factors"]["text"] > 1.0  # learnt that this provider counts more
    # A restarted replica is a new process with nothing in memory.
    with run_routefit(config) as c:
        time.sleep(1.0)
        rc = httpx.get(c.base_url + "/routefit/calibration").json()["routes"][alias]
    assert rc["samples"] == 30 and rc["factors"] == ra["factors"]


def test_the_embedded_store_keeps_calibration_across_restarts(sim, tmp_path):
    alias = "mystery"
    config = gateway_config(
        tmp_path / "c.yaml",
        [mystery_route(sim.base_url, alias)],
        store_path=str(tmp_path / "routefit.sqlite3"),
    )
    rng = random.Random(5)
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        for _ in range(12):
            ask(client, alias, conversation(rng))
        before = settle_samples(gw.base_url, alias, 12)["routes"][alias]
    with run_inprocess(config) as gw:
        after = httpx.get(gw.base_url + "/routefit/calibration").json()["routes"][alias]
    assert after["samples"] == 12 and after["factors"] == before["factors"]
    # ... and the CLI reads the same store
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}  # the config's store
    out = subprocess.run(
        [*routefit_command(), "calibration", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert '"samples": 12' in out.stdout


@pytest.fixture
def private_redis():
    """A redis-server of our own, to kill and restart mid-session."""
    with harness_private_redis() as server:
        yield server


def test_killing_redis_mid_session_loses_no_response(sim, tmp_path, private_redis):
    alias = "mystery"
    config = gateway_config(
        tmp_path / "c.yaml",
        [mystery_route(sim.base_url, alias)],
        redis_url=private_redis.url,
        calibration={"refresh_seconds": 0.5},
    )
    rng = random.Random(9)
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        for _ in range(10):
            ask(client, alias, conversation(rng))
        settle_samples(gw.base_url, alias, 10)
        private_redis.kill()
        for _ in range(10):  # every one answered while the store is down
            _, _, reply = ask(client, alias, conversation(rng))
            assert reply.choices[0].message.content
        down = httpx.get(gw.base_url + "/routefit/calibration").json()
        assert down["store"]["up"] is False
        assert down["samples_dropped"] >= 1
        ready = httpx.get(gw.base_url + "/readyz")
        assert ready.status_code == 200 and ready.json()["checks"]["store"] is False
        private_redis.start()
        for _ in range(5):
            ask(client, alias, conversation(rng))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            up = httpx.get(gw.base_url + "/routefit/calibration").json()
            if up["store"]["up"] and up["samples_recorded"] >= 15:
                break
            time.sleep(0.1)
        assert up["store"]["up"] is True
        assert up["samples_recorded"] >= 15  # 10 before + 5 after; only the outage was lost
        log = gw.log()
    # logged once when it went down and once when it came back, not per request
    assert log.count("unavailable") <= 2, log


# ----------------------------------------------------------------------------------------------
# Harder unknown tokenizers: mystery-2 and mystery-3 price each kind of text differently from
# o200k_base (code, JSON, digits, other scripts, whitespace) and add their own per-message and
# per-tool-call scaffolding. Mixed long tool-heavy sessions through the real proxy.

PROSE = (
    "the service reads its configuration at start up and keeps a small cache of recent "
    "answers so that a retry does not reach the backend twice while the operator watches"
).split()
CJK = "東京の天気は晴れです今日は会議があります資料を確認してください서울부산데이터분석"


def _png(rng: random.Random) -> str:
    import base64
    import io

    from PIL import Image

    w, h = rng.choice([(256, 256), (640, 480), (1200, 900), (90, 700)])
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (rng.randrange(256), 30, 90)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(PROSE) for _ in range(n)).capitalize() + "."


def _code(rng: random.Random, n: int) -> str:
    lines = []
    for i in range(n):
        name = rng.choice(PROSE)
        lines.append(f"def {name}_{i}(items, limit={rng.randint(1, 99)}):")
        lines.append(f"    result = [x for x in items if x.{name} > limit]")
        lines.append(f"    return {{'{name}': result, 'count': len(result)}}")
    return "\n".join(lines)


def _json(rng: random.Random, n: int) -> str:
    import json

    rows = [
        {"id": rng.randint(1, 10**6), "name": rng.choice(PROSE), "score": rng.random(), "ok": True}
        for _ in range(n)
    ]
    return json.dumps({"results": rows, "total": n}, indent=rng.choice([None, 2]))


def _log(rng: random.Random, n: int) -> str:
    return "\n".join(
        f"2025-03-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
        f"worker-{rng.randint(1, 9)} {rng.randint(100, 99999)} items {rng.random() * 100:.2f} ms"
        for _ in range(n)
    )


def _cjk(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(CJK) for _ in range(n))


def _tool_output(rng: random.Random) -> str:
    kind = rng.choice([_prose, _code, _json, _log, _cjk])
    size = {_prose: 400, _code: 25, _json: 30, _log: 60, _cjk: 600}[kind]
    return kind(rng, rng.randint(size // 10, size))


def mixed_session(rng: random.Random, rounds: int) -> list[list[dict]]:
    """The messages appended before each model call of one agent session."""
    steps = [
        [
            {"role": "system", "content": "You are a coding agent. " + _prose(rng, 80)},
            {"role": "user", "content": _prose(rng, rng.randint(10, 120))},
        ]
    ]
    for r in range(rounds):
        new: list[dict] = []
        if r and r % 5 == 0:
            content: object = _prose(rng, 30) if rng.random() < 0.5 else _cjk(rng, 80)
            if rng.random() < 0.4:
                content = [
                    {"type": "text", "text": str(content)},
                    {"type": "image_url", "image_url": {"url": _png(rng)}},
                ]
            new += [
                {"role": "assistant", "content": _prose(rng, 40)},
                {"role": "user", "content": content},
            ]
            steps.append(new)
            new = []
        calls = [
            {
                "id": f"call_{rng.getrandbits(40):x}",
                "type": "function",
                "function": {"name": "run", "arguments": f'{{"cmd": "{_prose(rng, 6)}"}}'},
            }
            for _ in range(rng.choice([1, 1, 2]))
        ]
        new.append({"role": "assistant", "content": _prose(rng, 20), "tool_calls": calls})
        new += [
            {"role": "tool", "tool_call_id": c["id"], "content": _tool_output(rng)} for c in calls
        ]
        steps.append(new)
    return steps


RUN_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


@pytest.mark.parametrize("stream", [0, 2])
@pytest.mark.parametrize("model", ["mystery-2", "mystery-3"])
def test_content_aware_calibration_on_mixed_sessions(
    sim, tmp_path, model, stream, refit_each_sample
):
    """Five interleaved agent sessions of mixed content on a route whose tokenizer routefit
    does not know: after 30 requests, p95 of |error| ≤ 3% and never more than 1% under. Most
    requests are anchored on the previous turn, so the error is the increment's: stream 2 on
    mystery-2 has a turn of two tool outputs that the weights alone priced 1.54% under (the
    increment now carries its own interval)."""
    alias = "hard"
    info = {"max_input_tokens": 32768, "max_output_tokens": 4096, "supports_vision": True}
    # The vision rule is configured (the simulator's); the tokenizer stays unknown.
    route = sim_route(alias, sim.base_url, model, model_info=info, image_rule="openai-tile")
    config = gateway_config(
        tmp_path / "c.yaml", [route], exact_prompt_headers=True, **refit_each_sample
    )
    rng = random.Random(zlib.crc32(model.encode()) + 17 + stream)
    # Interleaved sessions: every request is a sample; anchors help within a session only.
    sessions = [mixed_session(random.Random(rng.random()), 14) for _ in range(5)]
    order = [(s, i) for i in range(15) for s in range(len(sessions)) if i < len(sessions[s])]
    histories: list[list[dict]] = [[] for _ in sessions]
    errors = []
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        for n, (s, i) in enumerate(order):
            histories[s] += sessions[s][i]
            raw = client.chat.completions.with_raw_response.create(
                model=alias, messages=histories[s], tools=RUN_TOOL, max_tokens=64
            )
            estimate = int(raw.headers["x-routefit-prompt-tokens"])
            actual = raw.parse().usage.prompt_tokens
            errors.append((estimate - actual) / actual)
            settle_samples(gw.base_url, alias, n + 1)
    later = errors[30:]
    assert len(later) >= 30
    p95 = sorted(abs(e) for e in later)[int(0.95 * len(later))]
    assert p95 <= 0.03, (p95, [round(e, 4) for e in later])
    assert min(later) >= -0.01, [round(e, 4) for e in later]


@pytest.mark.parametrize("model", ["mystery-2", "mystery-3"])
def test_content_aware_calibration_without_anchors(sim, tmp_path, model, refit_each_sample):
    """Every request a new conversation (no anchor can help): the feature model alone."""
    alias = "hard"
    info = {"max_input_tokens": 32768, "max_output_tokens": 4096, "supports_vision": True}
    # The vision rule is configured (the simulator's); the tokenizer stays unknown.
    route = sim_route(alias, sim.base_url, model, model_info=info, image_rule="openai-tile")
    config = gateway_config(
        tmp_path / "c.yaml", [route], exact_prompt_headers=True, **refit_each_sample
    )
    rng = random.Random(zlib.crc32(model.encode()) + 29)
    errors = []
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        for n in range(70):
            steps = mixed_session(random.Random(rng.random()), rng.randint(0, 8))
            messages = [m for step in steps for m in step]
            raw = client.chat.completions.with_raw_response.create(
                model=alias, messages=messages, tools=RUN_TOOL, max_tokens=64
            )
            estimate = int(raw.headers["x-routefit-prompt-tokens"])
            actual = raw.parse().usage.prompt_tokens
            errors.append((estimate - actual) / actual)
            settle_samples(gw.base_url, alias, n + 1)
    later = errors[30:]
    p95 = sorted(abs(e) for e in later)[int(0.95 * len(later))]
    assert p95 <= 0.03, (p95, [round(e, 4) for e in later])
    assert min(later) >= -0.01, [round(e, 4) for e in later]


PLAIN = "the route learnt from plain english prose about tokens, windows and costs".split()
HAN = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学"


def test_a_script_no_sample_had_is_not_refused_on_the_priors_price(sim, tmp_path):
    """A route that learnt from English prose only, then a prompt in a script none of its
    samples had: the prior prices such characters at a tokenizer's worst case (a Claude route
    refused a 122k-token CJK prompt under a 200k window as 218,559 tokens). That price is a
    guess, no grounds for a refusal: the request is judged without it, forwarded, answered,
    and its count learnt."""
    alias = "mystery"
    info = {"max_input_tokens": 8192, "max_output_tokens": 1024}
    route = sim_route(alias, sim.base_url, "mystery-1", model_info=info)
    config = gateway_config(tmp_path / "c.yaml", [route])
    rng = random.Random(3)
    with run_inprocess(config) as gw:
        client = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        for i in range(12):
            prose = " ".join(rng.choice(PLAIN) for _ in range(rng.randint(200, 500)))
            ask(client, alias, [{"role": "user", "content": prose}])
            settle_samples(gw.base_url, alias, i + 1)
        han = "".join(rng.choice(HAN) for _ in range(3_000))
        raw = client.chat.completions.with_raw_response.create(
            model=alias, messages=[{"role": "user", "content": han}], max_tokens=64
        )
        assert raw.http_response.status_code == 200
        counted = raw.parse().usage.prompt_tokens
        assert counted <= info["max_input_tokens"] - 64
        assert raw.headers["x-routefit-actions"] == "none"
