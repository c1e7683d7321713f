"""The openai SDK's Responses API through routefit (in-process) to the sim's Responses wire."""

from __future__ import annotations

import httpx
import openai
import pytest
from harness import chat_only_route, gateway_config, sim_route
from inprocess import run_inprocess


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    url = sim.base_url
    routes = [
        sim_route("gpt-4o", url),
        sim_route(
            "small",
            url,
            "gpt-4o-small",
            model_info={"max_input_tokens": 8192, "max_output_tokens": 1024},
        ),
        # not an OpenAI provider: speaks chat only, so the wire translates
        chat_only_route("chatonly", url),
    ]
    config = gateway_config(tmp_path_factory.mktemp("gw") / "routefit.yaml", routes)
    with run_inprocess(config) as running:
        yield running


@pytest.fixture
def client(gw):
    return openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)


TOOLS = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    }
]


def test_non_stream_passthrough_matches_the_provider(client, fresh_sim):
    raw = client.responses.with_raw_response.create(
        model="gpt-4o", input="Say something about tokens.", store=False
    )
    reply = raw.parse()
    direct = openai.OpenAI(base_url=fresh_sim.url("/v1"), api_key="x").responses.create(
        model="gpt-4o", input="Say something about tokens.", store=False
    )
    assert reply.output_text == direct.output_text and reply.output_text
    assert raw.headers["x-routefit-route"] == "gpt-4o"
    assert raw.headers["x-routefit-actions"] == "none"
    sent = fresh_sim.last_request("/v1/responses")["body"]
    assert sent["input"] == "Say something about tokens." and sent["store"] is False
    assert reply.usage is not None and reply.usage.input_tokens > 0


def test_stream_relays_the_whole_event_sequence(client, fresh_sim):
    events = list(
        client.responses.create(
            model="gpt-4o",
            input=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "hi"},
            ],
            stream=True,
            store=False,
            prompt_cache_key="k1",
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds and kinds[-1] == "response.completed"
    final = events[-1].response
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text
    assert final.usage.input_tokens_details.cached_tokens >= 0
    sent = fresh_sim.last_request("/v1/responses")["body"]
    assert sent["prompt_cache_key"] == "k1"
    assert sent["input"][0] == {"role": "developer", "content": "Be brief."}


@pytest.mark.parametrize("stream", [False, True])
def test_translated_route_speaks_responses_over_chat(client, fresh_sim, stream):
    kwargs = {"model": "chatonly", "input": "call:lookup please", "tools": TOOLS}
    if stream:
        events = list(client.responses.create(stream=True, **kwargs))
        assert events[-1].type == "response.completed"
        reply = events[-1].response
    else:
        reply = client.responses.create(**kwargs)
    assert fresh_sim.last_request()["path"] == "/v1/chat/completions"
    call = reply.output[0]
    assert call.type == "function_call" and call.name == "lookup"
    assert reply.usage.input_tokens > 0
    follow = client.responses.create(
        model="chatonly",
        previous_response_id=reply.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "a word"}],
        tools=TOOLS,
    )
    assert follow.output_text
    sent = fresh_sim.last_request()["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]


def test_previous_response_id_chains_and_stored_endpoints(client, gw, fresh_sim):
    first = client.responses.create(model="gpt-4o", input="call:lookup the word", tools=TOOLS)
    call = first.output[0]
    assert call.type == "function_call"
    second = client.responses.create(
        model="gpt-4o",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "found"}],
        tools=TOOLS,
    )
    sent = fresh_sim.last_request("/v1/responses")["body"]
    assert "previous_response_id" not in sent
    assert [i.get("type", "message") for i in sent["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    got = client.responses.retrieve(second.id)
    assert got.id == second.id and got.output_text == second.output_text
    items = client.responses.input_items.list(second.id)
    assert len(items.data) == 3
    client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="gpt-4o", previous_response_id=second.id, input="more")
    assert err.value.body["code"] == "previous_response_not_found"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["gpt-4o", "chatonly"])
def test_a_continuation_names_the_response_it_continues(client, model, stream):
    """The provider is sent the whole chain, never ``previous_response_id`` (so it answers
    null): the response the client is given, every event's and the one it can retrieve, names
    the response it continued, as OpenAI's does."""
    first = client.responses.create(model=model, input="Remember the word kestrel.")
    follow = {"model": model, "input": "Which word?", "previous_response_id": first.id}
    if stream:
        with client.responses.stream(**follow) as events:
            carried = [e.response for e in events if hasattr(e, "response")]
            second = events.get_final_response()
        assert carried and all(r.previous_response_id == first.id for r in carried)
    else:
        second = client.responses.create(**follow)
    assert second.previous_response_id == first.id
    assert client.responses.retrieve(second.id).previous_response_id == first.id
    assert first.previous_response_id is None


def test_input_items_are_paged_as_openai_pages_them(client, gw):
    """Newest first by default, ``limit`` at a time with ``has_more``, ``after`` continuing from
    an item id (the SDK's auto-paging walks it to the end); a query OpenAI refuses is a 400."""
    words = [f"word{i}" for i in range(5)]
    reply = client.responses.create(
        model="gpt-4o", input=[{"role": "user", "content": w} for w in words]
    )
    said = lambda item: item.content  # noqa: E731 (kept as the client sent it: a string)
    page = client.responses.input_items.list(reply.id, limit=2)
    assert len(page.data) == 2 and page.has_more
    assert [said(i) for i in page.data] == ["word4", "word3"]  # desc by default
    walked = [said(i) for i in client.responses.input_items.list(reply.id, limit=2)]
    assert walked == words[::-1]  # every page, through ``after``
    asc = client.responses.input_items.list(reply.id, order="asc", limit=100)
    assert [said(i) for i in asc.data] == words and not asc.has_more
    url = f"{gw.v1}/responses/{reply.id}/input_items"
    for query in ("limit=0", "limit=101", "limit=abc", "order=sideways", "after=item_nope"):
        bad = httpx.get(f"{url}?{query}")
        assert bad.status_code == 400, (query, bad.text)
        assert bad.json()["error"]["param"] == query.split("=")[0]


def test_store_false_keeps_nothing(client):
    reply = client.responses.create(model="gpt-4o", input="hello", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(reply.id)


def test_overflow_is_context_length_exceeded(client, fresh_sim):
    huge = "word " * 20_000
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="small", input=huge)
    assert err.value.body["code"] == "context_length_exceeded"
    assert err.value.body["param"] == "input"
    assert fresh_sim.requests(path="/v1/responses") == []


def test_history_is_fitted_and_the_provider_sees_no_overflow(client, fresh_sim):
    items: list[dict] = [{"role": "developer", "content": "You are terse."}]
    for n in range(12):
        items.append({"role": "user", "content": f"question {n} " + "lorem ipsum " * 300})
        items.append(
            {
                "type": "function_call",
                "call_id": f"c{n}",
                "name": "lookup",
                "arguments": '{"word": "x"}',
            }
        )
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": "y " * 200})
    items.append({"role": "user", "content": "last question"})
    raw = client.responses.with_raw_response.create(
        model="small", input=items, tools=TOOLS, store=False
    )
    assert raw.parse().output_text
    assert "elided_messages" in raw.headers["x-routefit-actions"]
    sent = fresh_sim.last_request("/v1/responses")["body"]["input"]
    calls = {i["call_id"] for i in sent if i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in sent if i.get("type") == "function_call_output"}
    assert calls == outputs and sent[0] == items[0] and sent[-1] == items[-1]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "gpt-4o", "input": 7}, "input"),
        ({"model": "gpt-4o", "input": []}, "input"),
        (
            {"model": "gpt-4o", "input": [{"type": "function_call", "name": "x"}]},
            "input[0].call_id",
        ),
        ({"model": "gpt-4o", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "gpt-4o", "input": "x", "max_output_tokens": -1}, "max_output_tokens"),
        ({"model": "gpt-4o", "input": "x", "previous_response_id": 5}, "previous_response_id"),
        ({"model": "gpt-4o", "input": "x", "tools": [{"name": "t"}]}, "tools[0]"),
        (
            {"model": "gpt-4o", "input": "x", "tools": [{"type": "namespace", "tools": True}]},
            "tools[0].tools",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(gw, body, param):
    resp = httpx.post(gw.v1 + "/responses", json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param


@pytest.mark.parametrize(
    ("own", "param"),
    [
        ([{"type": "function_call", "name": "x"}], "input[0].call_id"),
        ([{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}], "input[1].role"),
    ],
)
def test_a_continuations_bad_item_is_named_in_its_own_input(client, gw, own, param):
    """The stored chain before a continuation's input is not the client's to count: its bad
    item is named by its place in the input it sent (it was counted after the chain's)."""
    first = client.responses.create(
        model="gpt-4o", input=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    )
    body = {"model": "gpt-4o", "previous_response_id": first.id, "input": own}
    for path in ("/responses", "/responses/input_tokens"):
        resp = httpx.post(gw.v1 + path, json=body)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == param, resp.text
        assert param in resp.json()["error"]["message"]


def test_unknown_item_types_are_priced_and_kept(client, fresh_sim):
    odd = {"type": "item_reference", "id": "msg_123"}
    reply = client.responses.create(
        model="gpt-4o",
        input=[{"role": "user", "content": "a"}, odd, {"role": "user", "content": "b"}],
        store=False,
    )
    assert reply.output_text
    assert fresh_sim.last_request("/v1/responses")["body"]["input"][1] == odd


def test_a_part_type_the_provider_does_not_take_is_its_refusal_relayed(client, fresh_sim):
    """A content part of a type OpenAI does not define goes on (routefit prices it as its JSON,
    it does not guess what the provider takes) and the provider's 400 reaches the client as
    sent, naming the part; a well-typed part beside it is taken."""
    odd = {"type": "text", "text": "chat's part type, not the Responses API's"}
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(
            model="gpt-4o",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "a"}, odd]}],
            store=False,
        )
    assert err.value.body["param"] == "input[0].content[1].type"
    assert err.value.body["code"] == "invalid_value"
    sent = fresh_sim.last_request("/v1/responses")["body"]["input"][0]["content"]
    assert sent[1] == odd


def test_a_gzip_body_chains_its_previous_response(client, gw, fresh_sim):
    import gzip
    import json

    first = client.responses.create(model="gpt-4o", input="Remember the word kestrel.")
    body = {"model": "gpt-4o", "input": "Which word?", "previous_response_id": first.id}
    resp = httpx.post(
        gw.v1 + "/responses",
        content=gzip.compress(json.dumps(body).encode()),
        headers={"content-type": "application/json", "content-encoding": "gzip"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    sent = fresh_sim.last_request("/v1/responses")["body"]
    texts = json.dumps(sent["input"])
    assert "kestrel" in texts and "Which word?" in texts  # the chain was resolved
    assert "previous_response_id" not in sent
