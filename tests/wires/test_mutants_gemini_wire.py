"""The Gemini wire's parser and writer at the points its properties do not read.

``test_gemini_properties.py`` drives valid generated sessions (text, thoughts, calls and their
responses) through parse → fit → chat or Gemini and checks pairing and object identity; it never
sends a malformed body (so it cannot see a refusal that names the wrong field), never sends the
less common part kinds (``file_data``, code execution, schemas with ``oneOf``), and never reads
what a fitted user message or a changed ``systemInstruction`` is written back as. These tests pin
those promises of the module docstrings, docs/wires.md's Gemini section and Google's
``generateContent`` shapes (issue 35, the mutation sample of the ``gemini`` group in
docs/mutation.md): each one was seen failing with the mutant it was written for.
"""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from typing import Any

import pytest
from PIL import Image
from test_gemini_properties import ROUTE

from pricing.capped import cap_message
from pricing.messages import ImagePart, Message, RequestError, TextPart
from proxy.wires.gemini_parse import GeminiRequest, parse_gemini
from proxy.wires.gemini_render import native_body
from strategies.elide import elision_marker


def _parse(body: Any, *, counting: bool = False) -> GeminiRequest:
    return parse_gemini(body, "small", sse=False, array=False, counting=counting)


def _refusal(body: Any) -> RequestError:
    """The client's mistake ``parse_gemini`` finds in ``body`` (it must find one)."""
    with pytest.raises(RequestError) as caught:
        _parse(body)
    return caught.value


def _user(*parts: Any) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


HELLO = [_user({"text": "hello"})]


# --- parsing: what a body becomes -----------------------------------------------------------


def test_a_file_data_image_in_snake_case_is_an_image_part() -> None:
    """Google's JSON takes a part's fields in snake case too (``file_data`` / ``file_uri`` /
    ``mime_type``, as proto JSON does): such an image is an image part priced by the route's
    rule, at its URI, like ``fileData``."""
    uri = "https://example.com/cat.png"
    camel = _parse({"contents": [_user({"fileData": {"fileUri": uri, "mimeType": "image/png"}})]})
    snake = _parse(
        {"contents": [_user({"file_data": {"file_uri": uri, "mime_type": "image/png"}})]}
    )
    assert camel.messages[0].parts == (ImagePart(uri),)
    assert snake.messages[0].parts == (ImagePart(uri),)


def test_a_part_of_another_kind_is_priced_as_its_json() -> None:
    """A part that is neither text, media, a call nor a response (code execution, unknown
    kinds) is priced as its compact JSON, without its thought fields (gemini_parse's
    ``_plain``): it is not free."""
    code = {"executableCode": {"language": "PYTHON", "code": "print(1)"}}
    request = _parse({"contents": [_user({**code, "thoughtSignature": "c2ln"})]})
    assert request.messages[0].parts == (
        TextPart('{"executableCode":{"code":"print(1)","language":"PYTHON"}}'),
    )


def test_a_function_response_is_priced_as_its_responses_compact_json() -> None:
    """docs/wires.md: "the ``response`` object's compact JSON is the text priced, capped and
    sent" for each ``functionResponse``."""
    request = _parse(
        {
            "contents": [
                _user({"text": "list it"}),
                {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
                _user({"functionResponse": {"name": "ls", "response": {"output": "a b", "n": 2}}}),
            ]
        }
    )
    tool = request.messages[-1]
    assert tool.role == "tool" and tool.tool_call_id == "gc1_0"
    assert tool.parts == (TextPart('{"n":2,"output":"a b"}'),)


@pytest.mark.parametrize("key", ["oneOf", "allOf", "anyOf"])
def test_type_names_are_lower_cased_inside_every_schema_combinator(key: str) -> None:
    """``json_schema``: type names in lower case wherever a schema nests one (``items``,
    ``anyOf``, ``oneOf``, ``allOf``, ...): a function's parameters are priced, and sent to a
    chat provider, as JSON Schema."""
    params = {
        "type": "OBJECT",
        "properties": {"v": {key: [{"type": "STRING"}, {"type": "INTEGER"}]}},
    }
    tools = [{"functionDeclarations": [{"name": "f", "parameters": params}]}]
    request = _parse({"contents": HELLO, "tools": tools})
    (fn,) = request.tools
    assert fn["parameters"]["properties"]["v"] == {key: [{"type": "string"}, {"type": "integer"}]}


def test_an_output_cap_and_a_candidate_count_of_one_are_valid() -> None:
    """``generationConfig.maxOutputTokens`` and ``candidateCount`` must be positive integers:
    1 is one (a router's classifier asks for a single token)."""
    request = _parse(
        {"contents": HELLO, "generationConfig": {"maxOutputTokens": 1, "candidateCount": 1}}
    )
    assert request.max_output_tokens == 1
    assert request.choices == 1


# --- parsing: refusals name their field -------------------------------------------------------


def test_a_body_that_is_not_an_object_is_refused_in_plain_words() -> None:
    """The client is told its body must be a JSON object (Google's 400 carries the message)."""
    assert _refusal([HELLO]).message == "the request body must be a JSON object"


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (
            {"contents": [_user({"text": 3})]},
            "contents[0].parts[0].text",
            "contents[0].parts[0].text must be a string",
        ),
        (
            {"contents": HELLO, "tools": ["googleSearch"]},
            "tools[0]",
            "tools[0] must be an object",
        ),
        (
            {"contents": HELLO, "tools": [{}, {"functionDeclarations": {"name": "f"}}]},
            "tools[1].functionDeclarations",
            "tools[1].functionDeclarations must be a list",
        ),
        (
            {"contents": HELLO, "tools": [{"functionDeclarations": [{"name": "f"}, {}]}]},
            "tools[0].functionDeclarations[1].name",
            "tools[0].functionDeclarations[1].name must be a string",
        ),
        (
            {"contents": HELLO, "generationConfig": {"maxOutputTokens": 0}},
            "generationConfig.maxOutputTokens",
            "generationConfig.maxOutputTokens must be a positive integer",
        ),
    ],
    ids=["text", "tool", "declarations", "declaration", "max-output"],
)
def test_a_refusal_names_the_field_and_its_place(body: Any, param: str, message: str) -> None:
    """``parse_gemini`` raises a RequestError naming the bad field: its JSON path is the error's
    ``param`` and its message says what the field must be."""
    refusal = _refusal(body)
    assert (refusal.param, refusal.message) == (param, message)


# --- writing a fitted conversation back as Gemini contents ----------------------------------


def _png() -> str:
    """A real 64×64 PNG, base64 (an image the route's rule prices by its size)."""
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def test_a_capped_user_message_keeps_the_parts_the_cap_left_and_sends_its_cut_text() -> None:
    """gemini_render: "a user message the fit changed (a capped text, an offloaded image) keeps
    every part it did not touch; its new text parts are ``{"text": ...}``" — the untouched text
    and image go back as the client's own part objects, the capped text as it was cut."""
    kept = {"text": "look at this", "thoughtSignature": "c2ln"}
    image = {"inlineData": {"mimeType": "image/png", "data": _png()}}
    long = {"text": " ".join(f"line {i} of the log" for i in range(400))}
    request = _parse({"contents": [_user(kept, image, long)]})
    (message,) = request.messages
    capped = cap_message(message, 400, ROUTE)
    assert capped is not None and capped.message.parts[:2] == message.parts[:2]
    cut = capped.message.parts[2]
    assert isinstance(cut, TextPart) and cut.text != long["text"]
    (content,) = native_body(request, {}, [capped.message])["contents"]
    assert content["role"] == "user"
    assert content["parts"][0] is kept
    assert content["parts"][1] is image
    assert content["parts"][2] == {"text": cut.text}


def test_a_changed_system_instruction_is_sent_as_system_instruction() -> None:
    """gemini_render: "``systemInstruction`` is the client's unless the fit changed it" — a
    changed one goes under ``systemInstruction`` (replacing a snake-case one), as its text."""
    for key in ("systemInstruction", "system_instruction"):
        request = _parse({key: {"parts": [{"text": "Be brief. " * 20}]}, "contents": HELLO})
        system, user = request.messages
        cut = replace(system, parts=(TextPart("Be brief."),), wire=None)
        out = native_body(request, {}, [cut, user])
        assert out["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
        assert "system_instruction" not in out
        assert out["contents"][0] is request.body["contents"][0]


def test_an_elision_marker_in_the_models_role_is_a_text_content() -> None:
    """gemini_render: "an elision marker in the model's role is a text content" —
    ``{"role": "model", "parts": [{"text": marker}]}``, the only model content routefit
    writes."""
    request = _parse({"contents": HELLO})
    marker = elision_marker(3, 900)
    wire = {"role": "assistant", "content": marker}  # as strategies.moves writes a marker
    elided = Message("assistant", (TextPart(marker),), wire=wire)
    contents = native_body(request, {}, [elided, *request.messages])["contents"]
    assert contents[0] == {"role": "model", "parts": [{"text": marker}]}
    assert contents[1] is request.body["contents"][0]


# --- second sample (seed 20261223) ------------------------------------------------------------
# Kills gemini_parse.x_parse_gemini__mutmut_19, x__content__mutmut_6 and x__content__mutmut_27
# (a refusal's param), x__plain__mutmut_30 (a thought field priced), x_json_schema__mutmut_53
# (a nullable type), gemini_render.x__response_object__mutmut_6 and _7 (a cut response that is
# JSON but no object) and xǁ_Contentsǁuser__mutmut_16 (an elision marker in the user's role).


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"contents": []}, "contents", "contents must be a non-empty list"),
        ({"contents": [HELLO[0], "hi"]}, "contents[1]", "contents[1] must be an object"),
        (
            {"contents": [{"role": "user", "parts": "hello"}]},
            "contents[0].parts",
            "contents[0].parts must be a list",
        ),
    ],
    ids=["contents", "content", "parts"],
)
def test_a_malformed_contents_is_refused_naming_its_place(
    body: Any, param: str, message: str
) -> None:
    """``parse_gemini`` raises a RequestError naming the bad field: an empty ``contents``, a
    content that is not an object and a content whose ``parts`` is not a list are refused with
    their JSON path as the error's ``param`` (what Google's 400 tells the client)."""
    refusal = _refusal(body)
    assert (refusal.param, refusal.message) == (param, message)


def test_a_thought_part_of_another_kind_is_priced_without_its_thought_flag() -> None:
    """gemini_parse: thought fields "are never edited nor priced" — a code-execution part the
    model marked ``thought: true`` is priced as its JSON without ``thought`` (and without
    ``thoughtSignature``), like the same part unmarked."""
    code = {"executableCode": {"language": "PYTHON", "code": "print(1)"}}
    marked = {**code, "thought": True, "thoughtSignature": "c2ln"}
    request = _parse({"contents": [*HELLO, {"role": "model", "parts": [marked]}]})
    model = request.messages[-1]
    assert model.role == "assistant"
    assert model.parts == (TextPart('{"executableCode":{"code":"print(1)","language":"PYTHON"}}'),)


def test_a_nullable_type_is_a_union_with_null() -> None:
    """``json_schema``: "``nullable`` as a null type" — ``{"type": "STRING", "nullable": true}``
    is ``{"type": ["string", "null"]}`` in the parameters priced and sent to a chat provider."""
    params = {
        "type": "OBJECT",
        "properties": {"v": {"type": "STRING", "nullable": True}},
    }
    tools = [{"functionDeclarations": [{"name": "f", "parameters": params}]}]
    (fn,) = _parse({"contents": HELLO, "tools": tools}).tools
    assert fn["parameters"] == {
        "type": "object",
        "properties": {"v": {"type": ["string", "null"]}},
    }


def test_a_capped_response_that_is_not_a_json_object_is_sent_as_its_output() -> None:
    """gemini_render: a capped response goes back with "the cut text as its ``response`` (the
    JSON object it still is, else ``{"output": text}``)" — Google's ``response`` is a Struct, so
    a response the client sent as a list, cut to a shorter list, goes as ``{"output": text}``
    under its call's name and id."""
    listing = [f"file_{i}.txt" for i in range(400)]
    request = _parse(
        {
            "contents": [
                _user({"text": "list it"}),
                {"role": "model", "parts": [{"functionCall": {"name": "ls", "id": "c1"}}]},
                _user({"functionResponse": {"name": "ls", "id": "c1", "response": listing}}),
            ]
        }
    )
    *head, tool = request.messages
    capped = cap_message(tool, 60, ROUTE)
    assert capped is not None
    cut = capped.message.parts[0]
    assert isinstance(cut, TextPart) and cut.text.startswith('["file_0.txt"')
    contents = native_body(request, {}, [*head, capped.message])["contents"]
    assert contents[:2] == request.body["contents"][:2]
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "ls", "id": "c1", "response": {"output": cut.text}}}
        ],
    }


def test_an_elision_marker_in_the_users_role_is_a_text_content() -> None:
    """An elision marker speaks as the user after tool results or first in the conversation
    (strategies.moves writes it with an OpenAI-shaped wire, no ``parts``): it goes as
    ``{"role": "user", "parts": [{"text": marker}]}``, followed by the client's contents."""
    request = _parse(
        {"contents": [_user({"text": "go on"}), {"role": "model", "parts": [{"text": "ok"}]}]}
    )
    marker = elision_marker(4, 1200)
    elided = Message("user", (TextPart(marker),), wire={"role": "user", "content": marker})
    contents = native_body(request, {}, [elided, request.messages[1]])["contents"]
    assert contents == [{"role": "user", "parts": [{"text": marker}]}, request.body["contents"][1]]
    assert contents[1] is request.body["contents"][1]
