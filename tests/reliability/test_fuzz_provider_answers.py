"""A provider's answer, fuzzed: nothing a provider says is taken on faith.

The simulator answers every request, and its answer is then changed at one field, any field, to
any JSON value, or that field removed: a whole answer's JSON, or one event of a stream. Whatever
comes back, the client gets either an answer or a 502 in its own wire's shape (a stream: an
error event), never routefit's internal error. Each client wire is tried on a route that speaks
it and on one it is translated for (chat, Messages and Gemini onto chat and Anthropic routes),
whole and streamed: every field of the answer in turn set to odd values, and any field to any
JSON value. Before, a usage that was a number where an object was due, a choice that was a
string, an integer beyond 64 bits in the usage: 500s from the translations of the answer.

In-process: routefit's app before ``MockTransport``, whose handler is the simulator's ASGI app
and the mutation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relkit import SCALE, every_path, json_values, mutate
from starlette.testclient import TestClient
from wire_shapes import check_wire_error_shape

from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimConfig, SimState
from proxy.transports.mock import MockTransport, asgi_handler

KEY = "sk-answers"
PROVIDER_KEY = "sk-sim"
HELLO = "Look at this and answer briefly."


def _route(alias: str, model: str) -> dict[str, Any]:
    base = "http://sim.local" if model.startswith("anthropic/") else "http://sim.local/v1"
    params = {"model": model, "api_base": base, "api_key": PROVIDER_KEY}
    # chatonly: not an OpenAI provider, so it speaks chat only and the Responses wire translates
    extra = (
        {"routefit": {"tokenizer": "o200k_base", "framing": "openai"}}
        if "deepseek" in model
        else {}
    )
    return {"model_name": alias, "litellm_params": params, **extra}


def _cases() -> dict[str, tuple[str, dict[str, Any]]]:
    chat = {"messages": [{"role": "user", "content": HELLO}], "max_tokens": 20}
    messages = {"messages": [{"role": "user", "content": HELLO}], "max_tokens": 20}
    gemini = {"contents": [{"role": "user", "parts": [{"text": HELLO}]}]}
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for route in ("gpt-4o", "claude"):
        for stream in (False, True):
            tag = f"{route}{' stream' if stream else ''}"
            out[f"chat on {tag}"] = (
                "/v1/chat/completions",
                {**chat, "model": route, "stream": stream},
            )
            out[f"messages on {tag}"] = (
                "/v1/messages",
                {**messages, "model": route, "stream": stream},
            )
            method = "streamGenerateContent?alt=sse" if stream else "generateContent"
            out[f"gemini on {tag}"] = (f"/v1beta/models/{route}:{method}", gemini)
    for route in ("gpt-4o", "claude", "chatonly"):  # its own, and translated to two others
        for stream in (False, True):
            body = {"model": route, "input": HELLO, "max_output_tokens": 20, "stream": stream}
            out[f"responses on {route}{' stream' if stream else ''}"] = ("/v1/responses", body)
    return out


CASES = _cases()


class Mutation:
    """How the next answer is changed: at one field of the whole answer or of one event of a
    stream that carries JSON (``event``), set to ``value`` or removed. The field is ``path``
    when given, else the ``pick``-th (modulo how many there are); so is the event."""

    def __init__(self) -> None:
        self.pick = 0
        self.path: tuple[Any, ...] | None = None
        self.event: int | None = None
        self.value: Any = None
        self.delete = False
        #: False: answers go through as the simulator gave them, the last one kept in ``seen``.
        self.on = True
        self.seen = b""

    def apply(self, data: Any) -> Any:
        paths = every_path(data)[1:]
        if not paths:
            return data
        path = self.path if self.path is not None else paths[self.pick % len(paths)]
        return mutate(data, path, self.value, self.delete)

    def answer(self, body: bytes, stream: bool) -> bytes:
        if not self.on:
            self.seen = body
            return body
        if not stream:
            return json.dumps(self.apply(json.loads(body))).encode()
        events = body.split(b"\n\n")
        carrying = [i for i, e in enumerate(events) if b"data: {" in e]
        if not carrying:
            return body
        i = carrying[(self.event if self.event is not None else self.pick) % len(carrying)]
        head, _, data = events[i].partition(b"data: ")
        events[i] = head + b"data: " + json.dumps(self.apply(json.loads(data))).encode()
        return b"\n\n".join(events)


def json_events(body: bytes) -> list[Any]:
    """The JSON of each event of a stream that carries it, in order."""
    return [json.loads(e.partition(b"data: ")[2]) for e in body.split(b"\n\n") if b"data: {" in e]


@pytest.fixture(scope="module")
def gw() -> Iterator[tuple[TestClient, Mutation]]:
    sim = SimState(config=SimConfig(api_keys=frozenset({PROVIDER_KEY})))
    simulator = asgi_handler(create_sim(sim))
    mutation = Mutation()

    async def provider(request: httpx.Request) -> httpx.Response:
        resp = await simulator(request)
        body = await resp.aread()
        stream = resp.headers.get("content-type", "").startswith("text/event-stream")
        if resp.status_code == 200:
            body = mutation.answer(body, stream)
        headers = [(k, v) for k, v in resp.headers.items() if k.lower() != "content-length"]
        return httpx.Response(resp.status_code, headers=headers, content=body)

    data = {
        "model_list": [
            _route("gpt-4o", "openai/gpt-4o"),
            _route("claude", "anthropic/claude-sonnet-4-5"),
            _route("chatonly", "deepseek/gpt-4o"),
        ],
        "routefit_settings": {"store_path": ":memory:", "teams": [{"id": "t", "keys": [KEY]}]},
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    app = create_app(config, transport=MockTransport(provider))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, mutation


def _post(client: TestClient, case: str) -> httpx.Response:
    path, body = CASES[case]
    return client.post(
        path, headers={"authorization": f"Bearer {KEY}", "x-goog-api-key": KEY}, json=body
    )


def _check(case: str, reply: httpx.Response, what: str) -> None:
    """An answer, or a 502 in the client's wire's shape; a stream's error event, not ours."""
    assert reply.status_code in (200, 502), f"{what}: {reply.status_code} {reply.text[:300]}"
    path = CASES[case][0].split("?")[0]
    check_wire_error_shape(path, reply.status_code, reply.content, what, None, True)
    assert b"routefit internal error" not in reply.content, f"{what}: {reply.text[:300]}"


#: The odd values every field is set to in turn (and removed).
ODD = [None, "x", -1, 2**64, [], {"x": 1}]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_field_of_an_answer_changed_is_relayed_or_a_502(
    gw: tuple[TestClient, Mutation], case: str
) -> None:
    """Each field of the untouched answer (a stream: of its first two and last two events that
    carry JSON), set to each odd value and removed, one at a time."""
    client, mutation = gw
    mutation.on = False
    try:
        assert _post(client, case).status_code == 200, case
    finally:
        mutation.on = True
    stream = "stream" in case
    if stream:
        events = json_events(mutation.seen)
        n = len(events)
        ends = sorted({0, 1, n - 2, n - 1} & set(range(n)))
        targets = [(i, p) for i in ends for p in every_path(events[i])[1:]]
    else:
        targets = [(None, p) for p in every_path(json.loads(mutation.seen))[1:]]
    assert targets, case
    try:
        for event, path in targets:
            mutation.event, mutation.path = event, path
            for value, delete in [*((v, False) for v in ODD), (None, True)]:
                mutation.value, mutation.delete = value, delete
                what = f"{case}: event {event} {path} = {'(removed)' if delete else repr(value)}"
                _check(case, _post(client, case), what)
    finally:
        mutation.event = mutation.path = None


@settings(
    max_examples=100 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    case=st.sampled_from(sorted(CASES)),
    pick=st.integers(0, 10_000),
    value=json_values,
    delete=st.booleans(),
)
def test_any_field_set_to_any_value_is_relayed_or_a_502(
    gw: tuple[TestClient, Mutation], case: str, pick: int, value: Any, delete: bool
) -> None:
    """Any event, any field, any JSON value (nested, NaN, beyond 64 bits)."""
    client, mutation = gw
    mutation.pick, mutation.value, mutation.delete = pick, value, delete
    _check(case, _post(client, case), f"{case}: field {pick} = {value!r}"[:300])
