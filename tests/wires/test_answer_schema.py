"""A JSON answer's schema is prompt: the provider puts it in the prompt and counts it (chat's
``response_format`` ``json_schema``, the Responses API's ``text.format``, Gemini's
``responseJsonSchema``/``responseSchema``, Claude's ``output_config.format``). routefit prices
it as its compact JSON on every wire, in process (routefit's app, the simulator behind the mock
transport): never below the provider's count, where it was left out (a schema of 3,000 tokens
priced as nothing)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic_tools import read_file_schema
from starlette.testclient import TestClient

from pricing.framing import default_framing, tools_tokens
from pricing.messages import answer_schema
from pricing.tokenizers import get_tokenizer
from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimConfig, SimState
from proxy.transports.mock import asgi_transport
from proxy.wires.anthropic_parse import parse_anthropic

KEY = "schema-key"
PROVIDER_KEY = "sk-sim"
#: A schema of many described properties: ~3,000 tokens of JSON.
SCHEMA = {
    "type": "object",
    "properties": {
        f"field_{i}": {
            "type": "string",
            "description": f"The {i}th field of the record, as the source document states it.",
        }
        for i in range(120)
    },
    "required": [f"field_{i}" for i in range(120)],
    "additionalProperties": False,
}
PROMPT = "Fill in the record from: the quick brown fox jumps over the lazy dog."


def _route(alias: str, model: str) -> dict[str, Any]:
    gemini = model.startswith("gemini/")
    entry: dict[str, Any] = {
        "model_name": alias,
        "litellm_params": {
            "model": model,
            "api_base": "http://sim.local/v1beta" if gemini else "http://sim.local/v1",
            "api_key": PROVIDER_KEY,
        },
    }
    if gemini:
        entry["model_info"] = {"max_input_tokens": 1_048_576, "max_output_tokens": 4096}
    return entry


@pytest.fixture(scope="module")
def gw() -> Iterator[tuple[TestClient, SimState]]:
    sim = SimState(config=SimConfig(api_keys=frozenset({PROVIDER_KEY})))
    data = {
        "model_list": [
            _route("gpt-4o", "openai/gpt-4o"),
            _route("gem", "gemini/gemini-sim"),
        ],
        "routefit_settings": {"store_path": ":memory:", "teams": [{"id": "t", "keys": [KEY]}]},
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    with TestClient(create_app(config, transport=asgi_transport(create_sim(sim)))) as client:
        yield client, sim


def _priced_and_counted(gw: tuple[TestClient, SimState], path: str, body: Any) -> tuple[int, int]:
    client, sim = gw
    reply = client.post(path, headers={"authorization": f"Bearer {KEY}"}, json=body)
    assert reply.status_code == 200, reply.text
    (seen,) = sim.requests(1)
    assert seen["status"] == 200, seen
    return int(reply.headers["x-routefit-prompt-tokens"]), int(seen["prompt_tokens"])


def _bodies() -> dict[str, tuple[str, dict[str, Any]]]:
    chat_format = {"type": "json_schema", "json_schema": {"name": "record", "schema": SCHEMA}}
    gemini_config = {"responseMimeType": "application/json", "responseJsonSchema": SCHEMA}
    gemini = {"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]}
    return {
        "chat": (
            "/v1/chat/completions",
            {
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": PROMPT}],
                "response_format": chat_format,
            },
        ),
        "responses": (
            "/v1/responses",
            {
                "model": "gpt-4o",
                "input": PROMPT,
                "text": {"format": {"type": "json_schema", "name": "record", "schema": SCHEMA}},
            },
        ),
        "gemini, on Gemini": (
            "/v1beta/models/gem:generateContent",
            {**gemini, "generationConfig": gemini_config},
        ),
        "gemini, on a chat route": (
            "/v1beta/models/gpt-4o:generateContent",
            {**gemini, "generationConfig": gemini_config},
        ),
    }


@pytest.mark.parametrize("wire", list(_bodies()))
def test_a_json_answers_schema_is_priced_never_below_the_providers_count(gw, wire: str) -> None:
    path, body = _bodies()[wire]
    priced, counted = _priced_and_counted(gw, path, body)
    schema = len(json.dumps(SCHEMA, separators=(",", ":"))) // 6  # ~ its tokens, at least
    assert counted > schema  # the provider counts the schema as prompt
    assert counted <= priced <= 1.5 * counted


@pytest.mark.parametrize("where", ["output_config", "output_format", "output_format+effort"])
def test_a_messages_answer_format_is_priced_as_its_json_without_the_tool_use_preamble(
    where: str,
) -> None:
    """Claude's JSON outputs (``output_config.format``; the beta's ``output_format``, also
    beside an ``output_config`` that sets no format): the schema is priced as its JSON like any
    tool's, but it brings no tool-use system prompt of its own — that comes with tools."""
    fmt = {"type": "json_schema", "schema": SCHEMA}
    body = {
        "model": "claude",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": PROMPT}],
        **({"output_config": {"format": fmt}} if where == "output_config" else {}),
        **({"output_format": fmt} if where.startswith("output_format") else {}),
        **({"output_config": {"effort": "low"}} if where.endswith("effort") else {}),
    }
    request = parse_anthropic(body)
    assert request.tools == answer_schema(fmt)
    framing = default_framing("claude-sonnet-4-5", "anthropic-legacy")
    tok = get_tokenizer("anthropic-legacy")
    schema = tok.count(json.dumps(request.tools[0], separators=(",", ":"), sort_keys=True))
    assert framing.tools_preamble > 0
    assert tools_tokens(request.tools, framing, tok) == schema + framing.per_message
    tool = {"name": "lookup", "parameters": {"type": "object"}}
    with_tool = tools_tokens((*request.tools, tool), framing, tok)
    assert with_tool > schema + framing.tools_preamble


def _tool_bodies(schema: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """A tool of this schema on each wire that reaches an OpenAI route."""
    about = "Read a file of the repository."
    return {
        "chat": (
            "/v1/chat/completions",
            {
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": PROMPT}],
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "read", "description": about, "parameters": schema},
                    }
                ],
            },
        ),
        "responses": (
            "/v1/responses",
            {
                "model": "gpt-4o",
                "input": PROMPT,
                "tools": [
                    {"type": "function", "name": "read", "description": about, "parameters": schema}
                ],
            },
        ),
        "messages, on a chat route": (
            "/v1/messages",
            {
                "model": "gpt-4o",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": PROMPT}],
                "tools": [{"name": "read", "description": about, "input_schema": schema}],
            },
        ),
    }


@pytest.mark.parametrize("wire", ["chat", "responses", "messages, on a chat route"])
def test_a_tools_whole_schema_is_priced_never_below_the_providers_count(gw, wire: str) -> None:
    """A Pydantic-written tool (``$defs``, ``anyOf`` with null, defaults): the nested model's
    descriptions, which live in ``$defs``, reach the provider's count, and the estimate is
    never below it (tests/pricing/test_tool_schemas.py holds the rule itself)."""
    schema = read_file_schema()
    priced, counted = _priced_and_counted(gw, *_tool_bodies(schema)[wire])
    bare = {k: v for k, v in schema.items() if k != "$defs"}
    _, bare_count = _priced_and_counted(gw, *_tool_bodies(bare)[wire])
    tok = get_tokenizer("o200k_base")
    nested = schema["$defs"]["LineRange"]["properties"].values()
    assert counted - bare_count >= sum(tok.count(p["description"]) for p in nested)
    assert counted <= priced <= 1.5 * counted
