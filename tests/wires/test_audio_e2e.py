"""Audio in a chat request (``input_audio`` parts, OpenAI's audio models), in process: routefit's
app, the simulator behind the mock transport. Audio reaches a route that takes it as the client
sent it, priced by its length never below what the provider counts; a model that takes none
answers with its own refusal; an Anthropic route gets its note; a conversation of recordings
longer than the window is fitted, its newest audio kept as audio."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from media_files import b64, wav
from starlette.testclient import TestClient

from pricing.recordings import input_audio_url, note
from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimConfig, SimState
from proxy.transports.mock import MockTransport, asgi_transport

KEY = "audio-key"
PROVIDER_KEY = "sk-sim"
#: The small route's window: routefit fits to it (the simulated model's own is 128k).
SMALL = 8192


def _route(alias: str, model: str, **info: Any) -> dict[str, Any]:
    base = "http://sim.local" if model.startswith("anthropic/") else "http://sim.local/v1"
    return {
        "model_name": alias,
        "litellm_params": {"model": model, "api_base": base, "api_key": PROVIDER_KEY},
        "model_info": info,
    }


class Gateway:
    def __init__(self, client: TestClient, sim: SimState, transport: MockTransport) -> None:
        self.client, self.sim, self.transport = client, sim, transport

    def chat(self, alias: str, messages: list[dict[str, Any]]) -> Any:
        body = {"model": alias, "messages": messages, "max_tokens": 64}
        return self.client.post(
            "/v1/chat/completions", headers={"authorization": f"Bearer {KEY}"}, json=body
        )

    def sent(self) -> dict[str, Any]:
        return json.loads(self.transport.sent[-1].content)

    def counted(self) -> int:
        seen = self.sim.requests(1)[0]
        assert seen["status"] == 200, seen
        return int(seen["prompt_tokens"])


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    sim = SimState(config=SimConfig(api_keys=frozenset({PROVIDER_KEY})))
    transport = asgi_transport(create_sim(sim))
    audio = {"supports_vision": False, "max_output_tokens": 4096}
    data = {
        "model_list": [
            _route("voice", "openai/gpt-audio-sim", max_input_tokens=128_000, **audio),
            _route("voice-small", "openai/gpt-audio-sim", max_input_tokens=SMALL, **audio),
            _route("gpt-4o", "openai/gpt-4o", supports_vision=True),
            _route("claude", "anthropic/claude-sim", supports_vision=True),
        ],
        "routefit_settings": {"store_path": ":memory:", "teams": [{"id": "t", "keys": [KEY]}]},
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    with TestClient(create_app(config, transport=transport)) as client:
        yield Gateway(client, sim, transport)


def _audio(seconds: float, fmt: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": b64(wav(seconds)), "format": fmt}}


def _ask(seconds: float, text: str = "What is said here?") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}, _audio(seconds)]}


def test_audio_reaches_an_audio_model_as_it_came_priced_by_its_length(gw: Gateway) -> None:
    messages = [{"role": "system", "content": "Transcribe."}, _ask(45)]
    reply = gw.chat("voice", messages)
    assert reply.status_code == 200, reply.text
    assert gw.sent()["messages"] == messages
    counted = gw.counted()
    assert counted > 450  # the simulated provider counts the audio: a token per 100 ms
    estimate = int(reply.headers["x-routefit-prompt-tokens"])
    assert counted <= estimate <= counted * 1.2


def test_a_model_that_takes_no_audio_answers_with_its_own_refusal(gw: Gateway) -> None:
    reply = gw.chat("gpt-4o", [_ask(5)])
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert "input_audio is only supported by certain models" in error["message"]
    assert gw.sim.requests(1)[0]["status"] == 400  # the provider said it, not routefit


def test_an_anthropic_route_gets_the_note_it_was_priced_as(gw: Gateway) -> None:
    message = _ask(30)
    reply = gw.chat("claude", [message])
    assert reply.status_code == 200, reply.text
    blocks = gw.sent()["messages"][0]["content"]
    url = input_audio_url(message["content"][1]["input_audio"])
    assert url is not None
    assert {"type": "text", "text": note(url)} in blocks
    assert gw.counted() <= int(reply.headers["x-routefit-prompt-tokens"])


def test_recordings_beyond_the_window_are_fitted_and_the_newest_stays_audio(gw: Gateway) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Transcribe each clip."}]
    for turn in range(16):  # 16 clips of a minute: ~9,600 tokens of audio
        messages.append(_ask(60, f"Clip {turn}: what is said?"))
        messages.append({"role": "assistant", "content": f"Clip {turn} is silence."})
    messages.append(_ask(60, "And this last one?"))
    reply = gw.chat("voice-small", messages)
    assert reply.status_code == 200, reply.text
    assert "elided" in reply.headers["x-routefit-actions"]
    sent = gw.sent()["messages"]
    assert sent[-1] == messages[-1]  # the newest audio goes as the client sent it
    assert len(sent) < len(messages)
    counted = gw.counted()
    assert counted + 64 <= SMALL
    assert counted <= int(reply.headers["x-routefit-prompt-tokens"])


@pytest.mark.parametrize(
    "audio",
    [{"data": b64(wav(1))}, {"data": b64(wav(1)), "format": "wav;base64"}, "AAAA"],
)
def test_a_malformed_audio_part_is_refused_in_openais_shape(gw: Gateway, audio: Any) -> None:
    part = {"type": "input_audio", "input_audio": audio}
    reply = gw.chat("voice", [{"role": "user", "content": [part]}])
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages[0].content[0].input_audio"
