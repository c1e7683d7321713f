"""CPU fairness through ``routefit serve``: pricing a 9 MB ``count_tokens`` body, or proving and
fitting a chat prompt of 480 KB of new text, does not hold the event loop (``/healthz`` keeps
answering while it is counted), and count and dry-run
requests are held to a per-team rate, refused in their wire's shape with ``retry-after``
while other teams are not affected."""

from __future__ import annotations

import random
import socket
import string
import threading
import uuid
from collections.abc import Iterator

import httpx
import orjson
import pytest
from harness import Running, gateway_config, run_routefit, sim_route

KEYS = {name: f"sk-{name}-" + uuid.uuid4().hex for name in ("big", "new", "busy", "calm")}
RATE = 3


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory) -> Iterator[Running]:
    routes = [
        sim_route("gpt-4o", sim.base_url),
        {
            "model_name": "claude",
            "litellm_params": {
                "model": "anthropic/claude-sim",
                "api_base": sim.base_url,
                "api_key": "sk-ant-sim",
            },
        },
    ]
    teams = [{"id": name, "keys": [key]} for name, key in KEYS.items()]
    config = gateway_config(
        tmp_path_factory.mktemp("fairness") / "c.yaml",
        routes,
        teams=teams,
        count_requests_per_minute=RATE,
    )
    # The loop under test needs a CPU of its own: in this process the test's clients share the GIL.
    with run_routefit(config) as running:
        yield running


def big_body(size: int, model: str = "claude", seed: int = 7) -> bytes:
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(4000)]
    messages = []
    while sum(len(m["content"]) for m in messages) < size:
        text = " ".join(rng.choice(words) for _ in range(200))
        role = "user" if len(messages) % 2 == 0 else "assistant"
        messages.append({"role": role, "content": text})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "count all of that"})
    return orjson.dumps({"model": model, "max_tokens": 10, "messages": messages})


def raw_post(gw: Running, path: str, body: bytes, key: str, sent: threading.Event) -> bytes:
    """POST over a plain socket: ``sent`` is set once every byte of the body was handed over."""
    host, port = gw.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=300) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {key}\r\nanthropic-version: 2023-06-01\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode()
        sock.sendall(head + body)
        sent.set()
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def healthz_between(gw: Running, path: str, body: bytes, key: str) -> tuple[int, bytes]:
    """(health checks sent after the whole body and answered before its reply, the reply).
    The checks' client is connected before the body goes: on a loaded machine, making it
    took longer than pricing a body of half a MB."""
    sent, answered = threading.Event(), threading.Event()
    reply: list[bytes] = []

    def post() -> None:
        try:
            reply.append(raw_post(gw, path, body, key, sent))
        finally:
            answered.set()

    between = 0
    with httpx.Client(timeout=120) as client:
        assert client.get(gw.base_url + "/healthz").status_code == 200
        poster = threading.Thread(target=post)
        poster.start()
        assert sent.wait(120)
        while not answered.is_set():
            r = client.get(gw.base_url + "/healthz")
            assert r.status_code == 200
            if not answered.is_set():
                between += 1
    poster.join()
    return between, reply[0]


def test_healthz_answers_while_a_9_mb_body_is_counted(gw):
    body = big_body(9 * 1024 * 1024)
    between, reply = healthz_between(gw, "/v1/messages/count_tokens", body, KEYS["big"])

    status, _, rest = reply.partition(b"\r\n")
    assert b" 200 " in status, reply[:500]
    assert orjson.loads(rest.split(b"\r\n\r\n", 1)[1])["input_tokens"] > 1_000_000
    # Priced on the loop, the count held every other request until it was done: at most the
    # few checks answered while the last bytes were still being read could come between.
    assert between >= 20, between


def test_healthz_answers_while_a_prompt_of_480_kb_of_new_text_is_fitted(gw):
    """Under the 512 KB at which a body is parsed off the loop, counting is not: 480 KB of text
    no one sent before (~190k tokens of made-up words, over gpt-4o's window) is counted and
    fitted — tens of ms that, on the loop, every other team's requests waited behind
    (bench/REPORT.md, 1o). The dry run is the chat path's fit without the provider's time."""
    body = big_body(480 * 1024, model="gpt-4o", seed=11)
    assert len(body) < 512 * 1024
    between, reply = healthz_between(gw, "/routefit/fit", body, KEYS["new"])
    status, _, rest = reply.partition(b"\r\n")
    assert b" 200 " in status, reply[:500]
    report = orjson.loads(rest.split(b"\r\n\r\n", 1)[1])["report"]
    assert report["estimate_after"] <= report["budget"] < report["estimate_before"]  # it was cut
    # On the loop, at most the checks answered while the last bytes were read came between
    # (0-2 measured; 26-613 off the loop).
    assert between >= 8, between


def test_count_and_dry_run_requests_are_held_to_a_per_team_rate(gw):
    busy = {"authorization": f"Bearer {KEYS['busy']}", "anthropic-version": "2023-06-01"}
    count = {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    url = gw.base_url + "/v1/messages/count_tokens"
    for _ in range(RATE - 1):
        assert httpx.post(url, json=count, headers=busy).status_code == 200
    # a dry run spends the same bucket
    dry = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(gw.base_url + "/routefit/fit", json=dry, headers=busy).status_code == 200
    refused = httpx.post(url, json=count, headers=busy)
    assert refused.status_code == 429
    assert refused.json()["type"] == "error"  # Anthropic's shape on its endpoint
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert int(refused.headers["retry-after"]) >= 1
    refused = httpx.post(gw.base_url + "/routefit/fit", json=dry, headers=busy)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"  # OpenAI's on chat
    assert refused.headers["retry-after"]
    # another team's bucket is its own; and real requests are not count requests
    calm = {"authorization": f"Bearer {KEYS['calm']}", "anthropic-version": "2023-06-01"}
    assert httpx.post(url, json=count, headers=calm).status_code == 200
    chat = httpx.post(gw.v1 + "/chat/completions", json=dry, headers=busy)
    assert chat.status_code == 200, chat.text
