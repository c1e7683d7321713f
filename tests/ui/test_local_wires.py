"""The example config's simulator routes (``api_base: sim://local``) serve every client wire with
no provider key: the openai SDK (chat and Responses, streamed and not) and the anthropic SDK, on
an OpenAI-provider route and on an Anthropic-provider one, through routefit (in-process) serving
``examples/routefit.yaml``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
import yaml
from inprocess import InProcess, run_inprocess

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "routefit.yaml"
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Iterator[InProcess]:
    """The example config as shipped, its store in a scratch folder, no provider key set."""
    data = yaml.safe_load(EXAMPLE.read_text())
    folder = tmp_path_factory.mktemp("example")
    data["routefit_settings"]["store_path"] = str(folder / "routefit.sqlite3")
    config = folder / "routefit.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    unset = {k: "" for k in os.environ if re.search(r"_API_KEY$", k)}
    with run_inprocess(config, env=unset, timeout=120) as running:
        yield running


def test_the_example_marks_an_anthropic_simulator_route() -> None:
    text = EXAMPLE.read_text()
    routes = {r["model_name"]: r for r in yaml.safe_load(text)["model_list"]}
    claude = routes["sim-claude"]["litellm_params"]
    assert claude["model"].startswith("anthropic/") and claude["api_base"] == "sim://local"
    assert "api_key" not in claude
    assert text.index("sim-claude") < text.index("REAL PROVIDERS")


@pytest.mark.parametrize("model", ["sim-claude", "sim-gpt-4o"])
def test_anthropic_sdk_chats_with_no_provider_key(example, model) -> None:
    client = anthropic.Anthropic(base_url=example.base_url, api_key="unused", max_retries=0)
    raw = client.messages.with_raw_response.create(model=model, max_tokens=64, messages=HELLO)
    reply = raw.parse()
    assert reply.content[0].type == "text" and reply.content[0].text
    assert reply.usage.input_tokens > 0
    assert raw.headers["x-routefit-route"] == model
    with client.messages.stream(model=model, max_tokens=64, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens > 0
    counted = client.messages.count_tokens(model=model, messages=HELLO)
    assert counted.input_tokens > 0


@pytest.mark.parametrize("model", ["sim-gpt-4o", "sim-claude"])
def test_openai_sdk_responses_with_no_provider_key(example, model) -> None:
    client = openai.OpenAI(base_url=example.v1, api_key="unused", max_retries=0)
    first = client.responses.create(model=model, input="Hello")  # no max: as Codex sends it
    assert first.output_text and first.usage.input_tokens > 0
    follow = client.responses.create(
        model=model, previous_response_id=first.id, input="And again?", max_output_tokens=64
    )
    assert follow.output_text
    assert follow.usage.input_tokens > first.usage.input_tokens  # the chain was sent
    with client.responses.stream(model=model, input="Hello", max_output_tokens=64) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        done = stream.get_final_response()
    assert text and done.status == "completed"


def test_openai_sdk_chat_on_the_anthropic_simulator_route(example) -> None:
    client = openai.OpenAI(base_url=example.v1, api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model="sim-claude", messages=HELLO, max_tokens=64)
    assert reply.choices[0].message.content and reply.usage.prompt_tokens > 0
