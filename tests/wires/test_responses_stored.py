"""``previous_response_id`` across two routefit replicas on a real Redis, and after a restart on
the embedded store."""

from __future__ import annotations

import secrets

import openai
from harness import gateway_config, run_routefit, sim_route
from inprocess import run_inprocess

TOOLS = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    }
]


def _chain(first_url: str, second_url: str, sim) -> None:
    a = openai.OpenAI(base_url=first_url, api_key="x", max_retries=0)
    b = openai.OpenAI(base_url=second_url, api_key="x", max_retries=0)
    first = a.responses.create(model="gpt-4o", input="call:lookup now", tools=TOOLS)
    call = first.output[0]
    second = b.responses.create(
        model="gpt-4o",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "ok"}],
        tools=TOOLS,
    )
    assert second.output_text
    sent = sim.last_request("/v1/responses")["body"]["input"]
    assert sent[0]["content"] == "call:lookup now"
    assert sent[1]["call_id"] == call.call_id and sent[2]["output"] == "ok"
    assert b.responses.retrieve(first.id).id == first.id


def test_two_replicas_share_stored_responses_on_redis(sim, redis_url, tmp_path):
    db = redis_url.rsplit("/", 1)[0] + "/" + str(5 + secrets.randbelow(9))
    routes = [sim_route("gpt-4o", sim.base_url)]
    config = gateway_config(tmp_path / "routefit.yaml", routes, redis_url=db)
    # Replicas as separate processes: a stored response reaches the other only through Redis.
    with run_routefit(config) as one, run_routefit(config) as two:
        _chain(one.v1, two.v1, sim)


def test_stored_responses_survive_a_restart_on_the_embedded_store(sim, tmp_path):
    routes = [sim_route("gpt-4o", sim.base_url)]
    store = str(tmp_path / "routefit.db")
    config = gateway_config(tmp_path / "routefit.yaml", routes, store_path=store)
    client_id = None
    with run_inprocess(config) as gw:
        c = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        client_id = c.responses.create(model="gpt-4o", input="remember me").id
    with run_inprocess(config) as gw:
        c = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        follow = c.responses.create(model="gpt-4o", previous_response_id=client_id, input="again")
        assert follow.output_text
        sent = sim.last_request("/v1/responses")["body"]["input"]
        assert sent[0]["content"] == "remember me" and sent[1]["type"] == "message"
        assert sent[-1]["content"] == "again"


def test_stored_responses_live_for_the_configured_ttl(sim, redis_url, tmp_path):
    """``routefit_settings.responses_ttl_seconds`` is the stored record's TTL in the store."""
    import redis

    db = redis_url.rsplit("/", 1)[0] + "/" + str(5 + secrets.randbelow(9))
    routes = [sim_route("gpt-4o", sim.base_url)]
    config = gateway_config(
        tmp_path / "routefit.yaml", routes, redis_url=db, responses_ttl_seconds=321
    )
    with run_inprocess(config) as gw:
        c = openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)
        rid = c.responses.create(model="gpt-4o", input="keep me a while").id
    client = redis.Redis.from_url(db)
    try:
        keys = list(client.scan_iter(match=f"*:resp:{rid}"))
        assert len(keys) == 1
        assert 0 < client.ttl(keys[0]) <= 321
    finally:
        client.delete(*keys)
        client.close()
