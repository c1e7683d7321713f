"""An image pricing refuses is named in the client's own body, on every wire.

Pricing names a part it cannot price in chat's terms of the conversation the wire parsed
(``messages[i].content[j].image_url.url``, ``i`` and ``j`` internal); each wire names it as its
clients wrote it (``Wire.where``): Anthropic's ``source.data``, the Responses API's
``input[k].content[j].image_url``, Gemini's ``contents[k].parts[j].inlineData.data`` — with the
indices of the client's body, not the internal ones (a system prompt is internal message 0, a
tool result its own message, a stored chain comes before the client's input). Each request here
puts the image after a system prompt and after a tool result, so the two sets of indices differ.
Served, dry-run and count endpoints alike, in each wire's error shape."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from media_files import b64
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimConfig, SimState
from proxy.transports.mock import asgi_transport
from proxy.wires import ANTHROPIC_WIRE, CHAT_WIRE, GEMINI_WIRE, RESPONSES_WIRE, RequestContext

KEY = "refused-media-key"
PROVIDER_KEY = "sk-sim"


def _png(width: int, height: int) -> bytes:
    """A PNG's signature and header chunk declaring ``width`` x ``height`` (no pixels)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    crc = struct.pack(">I", zlib.crc32(chunk))
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + crc + b"\0" * 32


#: Declares 10^10 pixels: over every route's limit.
HUGE = b64(_png(100_000, 100_000))
#: No image format at all.
JUNK = b64(b"this is not an image, whatever its media type says" * 4)
#: The words of each refusal (probe's), whichever wire it came by.
WHY = {HUGE: "declares 100000x100000", JUNK: "unsupported image format"}


def _route(alias: str, model: str) -> dict[str, Any]:
    family = model.split("/")[0]
    base = {"gemini": "http://sim.local/v1beta", "anthropic": "http://sim.local"}.get(
        family, "http://sim.local/v1"
    )
    entry: dict[str, Any] = {
        "model_name": alias,
        "litellm_params": {"model": model, "api_base": base, "api_key": PROVIDER_KEY},
        "model_info": {"supports_vision": True},
    }
    if family == "gemini":
        entry["routefit"] = {"image_rule": "gemini-tile"}
    return entry


class Gateway:
    def __init__(self, client: TestClient) -> None:
        self.client = client

    def post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"}
        return self.client.post(path, headers=headers, json=body)


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    sim = SimState(config=SimConfig(api_keys=frozenset({PROVIDER_KEY})))
    transport = asgi_transport(create_sim(sim))
    data = {
        "model_list": [
            _route("gpt-4o", "openai/gpt-4o"),
            _route("claude", "anthropic/claude-sim"),
            _route("gem", "gemini/gemini-sim"),
        ],
        "routefit_settings": {"store_path": ":memory:", "teams": [{"id": "t", "keys": [KEY]}]},
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    with TestClient(create_app(config, transport=transport)) as client:
        yield Gateway(client)


def _openai_error(reply: Any, data: str) -> tuple[str, str]:
    """(param, message) of an OpenAI-shaped 400 (chat, Responses)."""
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert WHY[data] in error["message"]
    return error["param"], error["message"]


def _says(message: str, field: str) -> None:
    """The message names ``field`` where it names the part, and nothing in chat's terms."""
    assert message.startswith(f"{field}: "), message
    assert "image_url.url" not in message or field.endswith("image_url.url"), message


# -- chat: its own terms, but the field the client used -------------------------------------


def _chat_body(image: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "max_tokens": 16,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Look it up."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "look", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "found it"},
            {"role": "user", "content": [{"type": "text", "text": "And this?"}, image]},
        ],
    }


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/routefit/fit?wire=chat"])
def test_chat_names_an_image_url_given_as_a_string_as_that_string(gw: Gateway, path: str) -> None:
    image = {"type": "image_url", "image_url": f"data:image/png;base64,{HUGE}"}
    param, message = _openai_error(gw.post(path, _chat_body(image)), HUGE)
    assert param == "messages[4].content[1].image_url"
    _says(message, param)


def test_chat_names_an_image_url_object_by_its_url(gw: Gateway) -> None:
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{JUNK}"}}
    param, message = _openai_error(gw.post("/v1/chat/completions", _chat_body(image)), JUNK)
    assert param == "messages[4].content[1].image_url.url"
    _says(message, param)


# -- Anthropic Messages ---------------------------------------------------------------------


def _image_block(data: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def _anthropic_body(data: str, in_result: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": "t1", "content": "found it"}
    last: list[dict[str, Any]] = [result, {"type": "text", "text": "And this?"}]
    if in_result:
        result["content"] = [{"type": "text", "text": "found it"}, _image_block(data)]
    else:
        last.append(_image_block(data))
    return {
        "model": "claude",
        "max_tokens": 16,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "Look it up."},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "t1", "name": "look", "input": {}},
                ],
            },
            {"role": "user", "content": last},
        ],
    }


def _anthropic_message(reply: Any, data: str) -> str:
    assert reply.status_code == 400, reply.text
    body = reply.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    message: str = body["error"]["message"]
    assert WHY[data] in message
    return message


@pytest.mark.parametrize(
    "path", ["/v1/messages", "/v1/messages/count_tokens", "/routefit/fit?wire=messages"]
)
@pytest.mark.parametrize("data", [HUGE, JUNK], ids=["huge", "junk"])
def test_anthropic_names_the_image_blocks_source(gw: Gateway, path: str, data: str) -> None:
    # internal: system, user, assistant, the tool result, then the rest of the last message
    message = _anthropic_message(gw.post(path, _anthropic_body(data, in_result=False)), data)
    _says(message, "messages[2].content[2].source.data")


def test_anthropic_names_an_image_inside_a_tool_result(gw: Gateway) -> None:
    reply = gw.post("/v1/messages", _anthropic_body(HUGE, in_result=True))
    _says(_anthropic_message(reply, HUGE), "messages[2].content[0].content[1].source.data")


def test_anthropic_names_a_url_source_by_its_url(gw: Gateway) -> None:
    body = _anthropic_body(HUGE, in_result=False)
    source = {"type": "url", "url": f"data:image/png;base64,{HUGE}"}
    body["messages"][2]["content"][2]["source"] = source
    reply = gw.post("/v1/messages", body)
    _says(_anthropic_message(reply, HUGE), "messages[2].content[2].source.url")


# -- OpenAI Responses -----------------------------------------------------------------------


def _responses_items(data: str, in_output: bool) -> list[dict[str, Any]]:
    image = {"type": "input_image", "image_url": f"data:image/png;base64,{data}"}
    output: Any = "found it"
    last = [{"type": "input_text", "text": "And this?"}]
    if in_output:
        output = [{"type": "input_text", "text": "found it"}, image]
    else:
        last.append(image)
    return [
        {"role": "user", "content": "Look it up."},
        {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": output},
        {"role": "user", "content": last},
    ]


def _responses_body(data: str, in_output: bool = False) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "max_output_tokens": 16,
        "instructions": "Be brief.",
        "input": _responses_items(data, in_output),
        "store": False,
    }


@pytest.mark.parametrize("path", ["/v1/responses", "/routefit/fit?wire=responses"])
@pytest.mark.parametrize("data", [HUGE, JUNK], ids=["huge", "junk"])
def test_responses_names_the_input_image(gw: Gateway, path: str, data: str) -> None:
    # internal: instructions, user, the call's group, its output, then the last user message
    param, message = _openai_error(gw.post(path, _responses_body(data)), data)
    assert param == "input[3].content[1].image_url"
    _says(message, param)


def test_responses_names_an_image_in_a_function_output(gw: Gateway) -> None:
    reply = gw.post("/v1/responses", _responses_body(HUGE, in_output=True))
    param, message = _openai_error(reply, HUGE)
    assert param == "input[2].output[1].image_url"
    _says(message, param)


def test_responses_counts_the_clients_items_after_a_stored_chain(gw: Gateway) -> None:
    first = gw.post(
        "/v1/responses",
        {"model": "gpt-4o", "max_output_tokens": 16, "input": "Hello.", "instructions": "Hi."},
    )
    assert first.status_code == 200, first.text
    body = {
        "model": "gpt-4o",
        "max_output_tokens": 16,
        "previous_response_id": first.json()["id"],
        "input": _responses_items(HUGE, in_output=False),
    }
    param, message = _openai_error(gw.post("/v1/responses", body), HUGE)
    assert param == "input[3].content[1].image_url"  # the client's index: the chain comes first
    _says(message, param)


# -- Gemini ---------------------------------------------------------------------------------


def _gemini_body(data: str, in_response: bool) -> dict[str, Any]:
    inline = {"inlineData": {"mimeType": "image/png", "data": data}}
    response: dict[str, Any] = {"name": "look", "response": {"found": "it"}}
    last: list[dict[str, Any]] = [{"functionResponse": response}, {"text": "And this?"}]
    if in_response:
        response["parts"] = [inline]
    else:
        last.append(inline)
    return {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Look it up."}]},
            {"role": "model", "parts": [{"functionCall": {"name": "look", "args": {}}}]},
            {"role": "user", "parts": last},
        ],
    }


def _google_message(reply: Any, data: str) -> str:
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    message: str = error["message"]
    assert WHY[data] in message
    return message


@pytest.mark.parametrize(
    "path",
    ["/v1beta/models/gem:generateContent", "/v1beta/models/gem:countTokens"],
)
@pytest.mark.parametrize("data", [HUGE, JUNK], ids=["huge", "junk"])
def test_gemini_names_the_inline_data(gw: Gateway, path: str, data: str) -> None:
    # internal: system, user, model, the function response, then the last content's rest
    message = _google_message(gw.post(path, _gemini_body(data, in_response=False)), data)
    _says(message, "contents[2].parts[2].inlineData.data")


def test_gemini_names_the_inline_data_of_a_dry_run(gw: Gateway) -> None:
    body = {"model": "gem", **_gemini_body(HUGE, in_response=False)}
    message = _google_message(gw.post("/routefit/fit?wire=gemini", body), HUGE)
    _says(message, "contents[2].parts[2].inlineData.data")


def test_gemini_names_media_inside_a_function_response(gw: Gateway) -> None:
    reply = gw.post("/v1beta/models/gem:generateContent", _gemini_body(HUGE, in_response=True))
    _says(
        _google_message(reply, HUGE),
        "contents[2].parts[0].functionResponse.parts[0].inlineData.data",
    )


def test_gemini_names_a_wrapped_count_request_by_its_wrapper(gw: Gateway) -> None:
    body = {"generateContentRequest": {"model": "models/gem", **_gemini_body(JUNK, False)}}
    reply = gw.post("/v1beta/models/gem:countTokens", body)
    _says(
        _google_message(reply, JUNK), "generateContentRequest.contents[2].parts[2].inlineData.data"
    )


# -- the mapping itself, wire by wire (no gateway) ------------------------------------------

IMAGE = "data:image/png;base64," + HUGE


def _ctx(body: Any, stored: Any = None, counting: bool = False) -> Any:
    return RequestContext(body, {}, {}, {}, None, stored=stored, counting=counting)


def test_fields_outside_the_messages_pass_as_they_are() -> None:
    requests = [
        (CHAT_WIRE, _chat_body({"type": "text", "text": "x"})),
        (ANTHROPIC_WIRE, _anthropic_body(HUGE, in_result=False)),
        (RESPONSES_WIRE, _responses_body(HUGE)),
        (GEMINI_WIRE, _gemini_body(HUGE, in_response=False)),
    ]
    for wire, body in requests:
        request = wire.parse(_ctx(body))
        for param in ("max_tokens", "tools[0].name", "model"):
            assert wire.where(request, param) == param


def test_chat_names_a_file_and_input_audio_by_their_data() -> None:
    pdf = {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}}
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    body = _chat_body(pdf)
    body["messages"][4]["content"].append(audio)
    request = CHAT_WIRE.parse(_ctx(body))
    where = CHAT_WIRE.where
    assert where(request, "messages[4].content[1].image_url.url") == (
        "messages[4].content[1].file.file_data"
    )
    assert where(request, "messages[4].content[2].image_url.url") == (
        "messages[4].content[2].input_audio.data"
    )
    assert where(request, "messages[4].content[0]") == "messages[4].content[0]"


def test_anthropic_names_messages_fragments_and_system_blocks() -> None:
    body = _anthropic_body(HUGE, in_result=True)
    body["messages"].append({"role": "system", "content": [_image_block(HUGE)]})
    request = ANTHROPIC_WIRE.parse(_ctx(body))
    where = ANTHROPIC_WIRE.where
    assert where(request, "messages[0]") == "system"
    assert where(request, "messages[0].content[0].image_url.url") == "system[0]"
    assert where(request, "messages[2].content[0]") == "messages[1].content[0]"
    assert where(request, "messages[3]") == "messages[2].content[0]"  # the tool_result block
    assert where(request, "messages[3].content[1].image_url.url") == (
        "messages[2].content[0].content[1].source.data"
    )
    assert where(request, "messages[4].content[0]") == "messages[2].content[1]"  # the rest
    assert where(request, "messages[5].content[0].image_url.url") == (
        "messages[3].content[0].source.data"
    )
    # what cannot be known exactly is named by what encloses it
    assert where(request, "messages[3].content[9].image_url.url") == "messages[2].content[0]"
    assert where(request, "messages[9].content[0].image_url.url") == "messages"


class _Chain:
    def __init__(self, prior: list[Any]) -> None:
        self.prior = prior

    def keep(self, response: Any, input: Any) -> None: ...

    async def save(self, response: Any, input: Any) -> None: ...


def test_responses_names_groups_and_the_stored_chain() -> None:
    image = {"type": "input_image", "image_url": IMAGE}
    chain = [
        {"role": "user", "content": [{"type": "input_text", "text": "before"}, image]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
    ]
    said = {"type": "message", "role": "assistant", "content": [image]}
    body = {
        "model": "gpt-4o",
        "input": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
            said,
            {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [image]},
        ],
    }
    request = RESPONSES_WIRE.parse(_ctx(body, stored=_Chain(chain)))
    where = RESPONSES_WIRE.where
    # internal: the chain's user message; one model-side group of the chain's reply and the
    # client's first three items (parts: the reply's text, the summary, the image); the output
    assert where(request, "messages[0].content[1].image_url.url") == "previous_response_id"
    assert where(request, "messages[1].content[0]") == "previous_response_id"  # the chain's reply
    assert where(request, "messages[1].content[1]") == "input[0].summary[0]"
    assert where(request, "messages[1].content[2].image_url.url") == "input[1].content[0].image_url"
    assert where(request, "messages[1]") == "input"  # a group of items: no one item is it
    assert where(request, "messages[2].content[0].image_url.url") == "input[3].output[0].image_url"
    assert where(request, "messages[2]") == "input[3]"


def test_responses_names_instructions_and_a_string_input() -> None:
    request = RESPONSES_WIRE.parse(_ctx({"model": "m", "instructions": "x", "input": "hello"}))
    assert RESPONSES_WIRE.where(request, "messages[0].content[0]") == "instructions"
    assert RESPONSES_WIRE.where(request, "messages[1].content[0]") == "input"


def test_gemini_skips_what_it_did_not_price_and_names_file_data() -> None:
    body = _gemini_body(HUGE, in_response=False)
    last = body["contents"][2]["parts"]
    last.insert(1, {"text": "thinking", "thought": True})  # never priced: no part of its own
    last.append({"file_data": {"mime_type": "image/png", "file_uri": "gs://b/i.png"}})
    request = GEMINI_WIRE.parse(_ctx(body))
    where = GEMINI_WIRE.where
    assert where(request, "messages[0].content[0]") == "systemInstruction"
    assert where(request, "messages[3]") == "contents[2].parts[0]"  # the functionResponse part
    assert where(request, "messages[4].content[1].image_url.url") == (
        "contents[2].parts[3].inlineData.data"
    )
    assert where(request, "messages[4].content[2].image_url.url") == (
        "contents[2].parts[4].file_data.file_uri"
    )
    assert where(request, "messages[4]") == "contents[2]"
