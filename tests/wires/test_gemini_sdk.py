"""Google's own Python SDK (``google-genai``) as a real client of ``routefit serve`` over
loopback, on a route served by the simulator: answers, streams, counts, function calls and their
responses, an image, and Google's errors as the SDK raises them — under ``/v1beta`` (its
default) and ``/v1``."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import gateway_config, run_routefit
from PIL import Image

from proxy.sim.completion import WORDS

genai = pytest.importorskip("google.genai")
from google.genai import errors, types  # noqa: E402

KEY = "gemini-sdk-key"


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    route = {
        "model_name": "small",
        "litellm_params": {"model": "openai/gpt-4o", "api_base": "sim://local"},
    }
    path: Path = tmp_path_factory.mktemp("gemini-sdk") / "routefit.yaml"
    config = gateway_config(path, [route], teams=[{"id": "sdk", "keys": [KEY]}])
    with run_routefit(config) as gw:
        yield gw.base_url


@pytest.fixture(params=["v1beta", "v1"])
def client(base_url: str, request: pytest.FixtureRequest) -> genai.Client:
    options = types.HttpOptions(base_url=base_url, api_version=request.param)
    return genai.Client(api_key=KEY, http_options=options)


def _words(text: str | None) -> set[str]:
    assert text
    return set(text.lower().replace(".", "").split())


def test_generate_content(client: genai.Client):
    reply = client.models.generate_content(
        model="small",
        contents="hello there",
        config=types.GenerateContentConfig(
            system_instruction="Be brief.", max_output_tokens=40, temperature=0.2
        ),
    )
    assert _words(reply.text) <= set(WORDS)
    usage = reply.usage_metadata
    assert usage is not None and usage.prompt_token_count and usage.candidates_token_count
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    assert reply.candidates and reply.candidates[0].finish_reason == types.FinishReason.STOP


def test_a_stream_says_what_the_answer_says(client: genai.Client):
    whole = client.models.generate_content(model="small", contents="tell me more")
    chunks = list(client.models.generate_content_stream(model="small", contents="tell me more"))
    assert len(chunks) > 1
    assert "".join(c.text or "" for c in chunks) == whole.text
    last, usage = chunks[-1].usage_metadata, whole.usage_metadata
    assert last is not None and usage is not None
    assert last.prompt_token_count == usage.prompt_token_count


def test_count_tokens(client: genai.Client):
    short = client.models.count_tokens(model="small", contents="hi").total_tokens
    long = client.models.count_tokens(model="small", contents="hi " * 200).total_tokens
    assert short and long and long > short + 150


READ = types.FunctionDeclaration(
    name="read_file",
    description="Read a file.",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={"path": types.Schema(type=types.Type.STRING)},
        required=["path"],
    ),
)
TOOLS = types.GenerateContentConfig(
    tools=[types.Tool(function_declarations=[READ])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
)


def test_a_function_call_and_its_response(client: genai.Client):
    ask = types.Content(role="user", parts=[types.Part.from_text(text="call:read_file now")])
    reply = client.models.generate_content(model="small", contents=[ask], config=TOOLS)
    calls = reply.function_calls
    assert calls and calls[0].name == "read_file" and calls[0].args
    assert reply.candidates and reply.candidates[0].content
    answer = types.Part.from_function_response(name="read_file", response={"output": "42"})
    history = [ask, reply.candidates[0].content, types.Content(role="user", parts=[answer])]
    after = client.models.generate_content(model="small", contents=history, config=TOOLS)
    assert _words(after.text) <= set(WORDS)  # the tool's result answered: a text turn


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (512, 512), (40, 80, 120)).save(buf, "PNG")
    return buf.getvalue()


def test_an_image(client: genai.Client):
    image = types.Part.from_bytes(data=_png(), mime_type="image/png")
    text = types.Part.from_text(text="what is this?")
    plain = client.models.count_tokens(model="small", contents=[text]).total_tokens
    counted = client.models.count_tokens(
        model="small", contents=[types.Content(role="user", parts=[text, image])]
    ).total_tokens
    assert plain and counted and counted - plain > 200  # gpt-4o: 4 tiles at high detail
    reply = client.models.generate_content(
        model="small", contents=[types.Content(role="user", parts=[text, image])]
    )
    assert _words(reply.text) <= set(WORDS)


def test_errors_are_the_sdks_own(client: genai.Client, base_url: str):
    with pytest.raises(errors.ClientError) as missing:
        client.models.generate_content(model="no-such-route", contents="hi")
    assert missing.value.code == 404 and missing.value.status == "NOT_FOUND"
    stranger = genai.Client(api_key="wrong", http_options=types.HttpOptions(base_url=base_url))
    with pytest.raises(errors.ClientError) as denied:
        stranger.models.generate_content(model="small", contents="hi")
    assert denied.value.code == 401 and denied.value.status == "UNAUTHENTICATED"
