"""PDFs, audio, video and HEIC photos on every wire, in process (routefit's app, the simulator
behind the mock transport): a chat ``file`` part, a Responses ``input_file``, a Gemini
``inlineData`` PDF and an Anthropic ``document`` translated for a chat route are priced from their
pages — never below what the provider counts — and reach the provider in the shape its wire takes
them; Gemini audio and video are priced by the second on a Gemini route and sent as their note to
a chat route; chat audio (``input_audio``) reaches an audio model as it came, priced by its
length, gets the provider's own refusal from a model that takes none and goes to an Anthropic
route as its note; a HEIC photo is priced by Google's rule on a Gemini route and refused
elsewhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
import yaml
from gpt4o_route import gpt4o_route
from media_files import b64, document_block, heic, text_pdf, video, wav
from starlette.testclient import TestClient

from pricing.probe import placeholder
from pricing.recordings import input_audio_url, note
from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimConfig, SimState
from proxy.transports.mock import MockTransport, asgi_transport
from proxy.wires.responses_items import parse_responses, render_items
from strategies.offload import offload_images

KEY = "documents-key"
PROVIDER_KEY = "sk-sim"
PDF = text_pdf(6, words=200, seed=5)
PDF_URL = f"data:application/pdf;base64,{b64(PDF)}"
#: An audio model's map entry (no pictures), and the small audio route's window: routefit fits
#: to it (the simulated model's own is 128k).
AUDIO_MODEL = {"supports_vision": False, "max_output_tokens": 4096}
SMALL = 8192


def _route(alias: str, model: str, **info: Any) -> dict[str, Any]:
    family = model.split("/")[0]
    base = {"gemini": "http://sim.local/v1beta", "anthropic": "http://sim.local"}.get(
        family, "http://sim.local/v1"
    )
    entry: dict[str, Any] = {
        "model_name": alias,
        "litellm_params": {"model": model, "api_base": base, "api_key": PROVIDER_KEY},
        "model_info": {"supports_vision": True, **info},
    }
    if family == "gemini":
        entry["routefit"] = {"image_rule": "gemini-tile"}
    return entry


class Gateway:
    def __init__(self, client: TestClient, sim: SimState, transport: MockTransport) -> None:
        self.client, self.sim, self.transport = client, sim, transport

    def post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"}
        return self.client.post(path, headers=headers, json=body)

    def chat(self, alias: str, messages: list[dict[str, Any]]) -> Any:
        body = {"model": alias, "messages": messages, "max_tokens": 64}
        return self.post("/v1/chat/completions", body)

    def sent(self) -> dict[str, Any]:
        return json.loads(self.transport.sent[-1].content)

    def counted(self) -> int:
        """What the simulated provider counted for the last request it answered."""
        seen = self.sim.requests(1)[0]
        assert seen["status"] == 200, seen
        return int(seen["prompt_tokens"])


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    sim = SimState(config=SimConfig(api_keys=frozenset({PROVIDER_KEY})))
    transport = asgi_transport(create_sim(sim))
    data = {
        "model_list": [
            _route("gpt-4o", "openai/gpt-4o"),
            _route("claude", "anthropic/claude-sim"),
            _route("gem", "gemini/gemini-sim", max_input_tokens=1_048_576, max_output_tokens=4096),
            _route(
                "gem-small",
                "gemini/gemini-sim-small",
                max_input_tokens=8192,
                max_output_tokens=1024,
            ),
            _route("voice", "openai/gpt-audio-sim", max_input_tokens=128_000, **AUDIO_MODEL),
            _route("voice-small", "openai/gpt-audio-sim", max_input_tokens=SMALL, **AUDIO_MODEL),
        ],
        "routefit_settings": {"store_path": ":memory:", "teams": [{"id": "t", "keys": [KEY]}]},
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    with TestClient(create_app(config, transport=transport)) as client:
        yield Gateway(client, sim, transport)


def _estimate(reply: Any) -> int:
    assert reply.status_code == 200, reply.text
    return int(reply.headers["x-routefit-prompt-tokens"])


def test_a_chat_file_part_is_forwarded_and_priced_from_its_pages(gw: Gateway) -> None:
    part = {"type": "file", "file": {"filename": "r.pdf", "file_data": PDF_URL}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "Summarise."}, part]}]
    reply = gw.post("/v1/chat/completions", {"model": "gpt-4o", "messages": messages})
    estimate = _estimate(reply)
    assert gw.sent()["messages"] == messages
    counted = gw.counted()
    assert counted <= estimate <= 2 * counted


def test_a_chat_file_by_id_is_refused_with_openais_error(gw: Gateway) -> None:
    part = {"type": "file", "file": {"file_id": "file-abc"}}
    messages = [{"role": "user", "content": [part]}]
    reply = gw.post("/v1/chat/completions", {"model": "gpt-4o", "messages": messages})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages[0].content[0].file"
    assert "file_data" in error["message"]


def test_a_responses_input_file_is_forwarded_and_priced_from_its_pages(gw: Gateway) -> None:
    part = {"type": "input_file", "filename": "r.pdf", "file_data": PDF_URL}
    item = {"role": "user", "content": [{"type": "input_text", "text": "Summarise."}, part]}
    reply = gw.post("/v1/responses", {"model": "gpt-4o", "input": [item]})
    estimate = _estimate(reply)
    counted = gw.counted()
    assert counted <= estimate <= 2 * counted


def _gemini_pdf() -> dict[str, Any]:
    return {"inlineData": {"mimeType": "application/pdf", "data": b64(PDF)}}


def test_a_gemini_pdf_is_priced_from_its_pages(gw: Gateway) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "Summarise."}, _gemini_pdf()]}]}
    reply = gw.post("/v1beta/models/gem:generateContent", body)
    estimate = _estimate(reply)
    assert gw.sent()["contents"] == body["contents"]
    counted = gw.counted()  # 258 a page, and no text, by Google's rule
    assert counted <= estimate <= counted + 100  # routefit prices it so too


def test_an_old_gemini_pdf_goes_when_the_conversation_outgrows_the_window(
    gw: Gateway,
) -> None:
    big = text_pdf(30, words=300, seed=9)  # 30 pages: over 8k by its pictures alone
    pdf = {"inlineData": {"mimeType": "application/pdf", "data": b64(big)}}
    contents = [
        {"role": "user", "parts": [{"text": "Read r.pdf."}, pdf]},
        {"role": "model", "parts": [{"text": "It is a report of numbered items."}]},
        {"role": "user", "parts": [{"text": "Thanks. Now say hello."}]},
    ]
    reply = gw.post("/v1beta/models/gem-small:generateContent", {"contents": contents})
    estimate = _estimate(reply)
    sent = gw.sent()["contents"]
    assert b64(big)[:64] not in json.dumps(sent)  # offloaded or elided: never cut, never sent
    assert gw.counted() <= estimate <= int(reply.headers["x-routefit-budget"])


def test_an_anthropic_document_reaches_a_chat_route_as_a_file_part(gw: Gateway) -> None:
    messages = [
        {"role": "user", "content": [document_block(PDF), {"type": "text", "text": "Summarise."}]}
    ]
    reply = gw.post("/v1/messages", {"model": "gpt-4o", "max_tokens": 256, "messages": messages})
    estimate = _estimate(reply)
    (part, text) = gw.sent()["messages"][0]["content"]
    assert part == {"type": "file", "file": {"filename": "document.pdf", "file_data": PDF_URL}}
    assert text == {"type": "text", "text": "Summarise."}
    counted = gw.counted()
    assert counted <= estimate <= 2 * counted


@pytest.mark.parametrize("wire", ["chat", "responses"])
def test_a_chat_or_responses_pdf_reaches_an_anthropic_route_as_a_document(
    gw: Gateway, wire: str
) -> None:
    if wire == "chat":
        part = {"type": "file", "file": {"filename": "r.pdf", "file_data": PDF_URL}}
        messages = [{"role": "user", "content": [part, {"type": "text", "text": "Summarise."}]}]
        reply = gw.post("/v1/chat/completions", {"model": "claude", "messages": messages})
    else:
        part = {"type": "input_file", "filename": "r.pdf", "file_data": PDF_URL}
        item = {"role": "user", "content": [part, {"type": "input_text", "text": "Summarise."}]}
        reply = gw.post("/v1/responses", {"model": "claude", "input": [item], "store": False})
    estimate = _estimate(reply)
    (document, text) = gw.sent()["messages"][0]["content"]
    assert document == document_block(PDF)
    assert text == {"type": "text", "text": "Summarise."}
    counted = gw.counted()
    assert counted <= estimate <= 2 * counted


def test_a_responses_file_the_fit_offloads_goes_as_text_and_its_neighbours_as_they_came() -> None:
    """The writer keeps each part the fit left (the client's own object, its filename too) and
    writes what it replaced as text — never a PDF as an ``input_image``."""
    route = gpt4o_route()
    file = {"type": "input_file", "filename": "r.pdf", "file_data": PDF_URL}
    by_id = {"type": "input_file", "file_id": "file-1"}  # priced as its JSON, kept as it came
    text = {"type": "input_text", "text": "Read these."}
    request = parse_responses({"model": "gpt-4o", "input": [
        {"role": "user", "content": [text, file, by_id]}]})  # fmt: skip
    (message,) = request.messages
    assert [type(p).__name__ for p in message.parts] == ["TextPart", "ImagePart", "TextPart"]
    assert render_items(request, [message]) == request.body["input"]  # the very items
    (sent,) = render_items(request, [offload_images(message, route)])
    assert sent["content"][0] == text and sent["content"][2] == by_id
    assert sent["content"][1] == {
        "type": "input_text",
        "text": placeholder(None, PDF_URL),
    }


def _gemini_audio(seconds: float) -> dict[str, Any]:
    return {"inlineData": {"mimeType": "audio/wav", "data": b64(wav(seconds))}}


def test_gemini_audio_is_priced_by_the_second_and_sent_as_it_came(gw: Gateway) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "Transcribe."}, _gemini_audio(90)]}]}
    reply = gw.post("/v1beta/models/gem:generateContent", body)
    estimate = _estimate(reply)
    assert gw.sent()["contents"] == body["contents"]
    counted = gw.counted()  # 32 tokens a second, by Google's rule: 2,880 of it the audio
    assert counted > 90 * 32
    assert counted <= estimate <= counted + 100


def test_gemini_audio_reaches_a_chat_route_as_its_note(gw: Gateway) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "Transcribe."}, _gemini_audio(90)]}]}
    reply = gw.post("/v1beta/models/gpt-4o:generateContent", body)
    estimate = _estimate(reply)
    (message,) = gw.sent()["messages"]
    note = next(p["text"] for p in message["content"] if p["text"].startswith("[audio omitted"))
    assert note == placeholder(None, f"data:audio/wav;base64,{b64(wav(90))}")
    assert gw.counted() <= estimate < 200  # priced as the note it is sent as


def _gemini_video(seconds: int, **meta: Any) -> dict[str, Any]:
    part: dict[str, Any] = {"inlineData": {"mimeType": "video/mp4", "data": b64(video(seconds))}}
    return {**part, "videoMetadata": meta} if meta else part


@pytest.mark.parametrize("meta", [{}, {"fps": 3}], ids=["one frame a second", "three"])
def test_gemini_video_is_priced_by_its_frames_and_sent_as_it_came(
    gw: Gateway, meta: dict[str, Any]
) -> None:
    parts = [{"text": "What happens?"}, _gemini_video(20, **meta)]
    body = {"contents": [{"role": "user", "parts": parts}]}
    estimate = _estimate(gw.post("/v1beta/models/gem:generateContent", body))
    assert gw.sent()["contents"] == body["contents"]
    counted = gw.counted()  # Google's rule: 258 a frame, 42 a second besides
    assert counted > 20 * meta.get("fps", 1) * 258
    assert counted <= estimate <= 1.1 * counted + 50


def test_an_old_gemini_video_goes_when_the_conversation_outgrows_the_window(
    gw: Gateway,
) -> None:
    """20 s of video (~6,400 tokens) twice does not fit 8k: the older one goes (offloaded or
    elided: never sent), the one the user asks about now is sent as it came."""
    contents = [
        {"role": "user", "parts": [{"text": "Watch this."}, _gemini_video(20)]},
        {"role": "model", "parts": [{"text": "Watched."}]},
        {"role": "user", "parts": [{"text": "And this?"}, _gemini_video(21)]},
    ]
    reply = gw.post("/v1beta/models/gem-small:generateContent", {"contents": contents})
    estimate = _estimate(reply)
    sent = gw.sent()["contents"]
    assert b64(video(20))[:64] not in json.dumps(sent)
    assert sent[-1]["parts"] == contents[2]["parts"]
    assert gw.counted() <= estimate <= int(reply.headers["x-routefit-budget"])


def test_a_frame_rate_google_would_refuse_is_refused_in_its_shape(gw: Gateway) -> None:
    parts = [{"text": "What happens?"}, _gemini_video(2, fps=0)]
    reply = gw.post("/v1beta/models/gem:generateContent", {"contents": [{"parts": parts}]})
    assert reply.status_code == 400
    assert "videoMetadata.fps" in reply.json()["error"]["message"]


def test_gemini_video_reaches_a_chat_route_as_its_note(gw: Gateway) -> None:
    parts = [{"text": "What happens?"}, _gemini_video(20)]
    body = {"contents": [{"role": "user", "parts": parts}]}
    estimate = _estimate(gw.post("/v1beta/models/gpt-4o:generateContent", body))
    (message,) = gw.sent()["messages"]
    note = next(p["text"] for p in message["content"] if p["text"].startswith("[video omitted"))
    assert note == placeholder(None, f"data:video/mp4;base64,{b64(video(20))}")
    assert gw.counted() <= estimate < 200


def test_a_gemini_heic_photo_is_priced_by_googles_rule_and_sent_as_it_came(gw: Gateway) -> None:
    photo = {"inlineData": {"mimeType": "image/heic", "data": b64(heic(1001, 777))}}
    body = {"contents": [{"role": "user", "parts": [{"text": "What is this?"}, photo]}]}
    estimate = _estimate(gw.post("/v1beta/models/gem:generateContent", body))
    assert gw.sent()["contents"] == body["contents"]
    counted = gw.counted()  # gemini-tile: 258 a crop of the photo as decoded (1001x777)
    assert counted > 258 * 4
    assert counted <= estimate <= counted + 100


@pytest.mark.parametrize("wire", ["gemini", "chat"])
def test_a_heic_photo_for_a_provider_that_takes_none_is_refused_in_the_wires_shape(
    gw: Gateway, wire: str
) -> None:
    data = b64(heic(64, 48))
    if wire == "gemini":
        photo = {"inlineData": {"mimeType": "image/heic", "data": data}}
        body: dict[str, Any] = {"contents": [{"role": "user", "parts": [photo]}]}
        reply = gw.post("/v1beta/models/gpt-4o:generateContent", body)
    else:
        part = {"type": "image_url", "image_url": {"url": f"data:image/heic;base64,{data}"}}
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": [part]}]}
        reply = gw.post("/v1/chat/completions", body)
    assert reply.status_code == 400
    assert "only Google's models" in reply.json()["error"]["message"]


# --- chat audio (input_audio parts) ---------------------------------------------------------


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


def test_the_openai_sdk_sends_audio_as_its_types_spell_it(gw: Gateway) -> None:
    """The real client's ``input_audio`` shape (its typed params), through the gateway."""
    client = openai.OpenAI(
        base_url=f"{gw.client.base_url}/v1", api_key=KEY, http_client=gw.client, max_retries=0
    )
    raw = client.chat.completions.with_raw_response.create(
        model="voice",
        max_tokens=16,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is said?"},
                    {"type": "input_audio", "input_audio": {"data": b64(wav(20)), "format": "wav"}},
                ],
            }
        ],
    )
    reply = raw.parse()
    assert reply.choices[0].message.content
    assert gw.sent()["messages"][0]["content"][1]["type"] == "input_audio"
    assert gw.counted() <= int(raw.headers["x-routefit-prompt-tokens"])
