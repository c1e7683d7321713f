"""The Responses wire's items and its chat translation at the points the other tests do not read.

``test_responses_units.py`` checks items as fitting units (pairing, reasoning kept, stable
bytes), and ``test_responses_e2e.py`` drives the openai SDK through a native and a translated
route, reading the answer's text; neither reads what a translated request carries to chat (the
instructions, a tool output, a custom tool, a function's description, the output format), the
whole event sequence a translated stream writes, the usage a translated answer reports, nor which
field a refusal names. These tests pin those promises of the module docstrings, docs/wires.md's
Responses section and the OpenAI Responses API's shapes (issue 35, the mutation sample of the
``responses`` group in docs/mutation.md): each one was seen failing with the mutant it was
written for.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from pricing.messages import ChatRequest, ImagePart, RequestError, TextPart
from proxy.wires.responses_items import parse_responses, render_items
from proxy.wires.responses_translate import ChatStreamToResponses, chat_body, chat_to_response

RID = "resp_" + "ab" * 24
PNG_URL = "data:image/png;base64,iVBORw0KGgo="

TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch."},
]


def _request(**fields: Any) -> ChatRequest:
    return parse_responses({"model": "chatonly", "input": "hi", **fields})


def _refusal(body: Any) -> RequestError:
    """The client's mistake ``parse_responses`` finds in ``body`` (it must find one)."""
    with pytest.raises(RequestError) as caught:
        parse_responses(body)
    return caught.value


def _events(frames: list[bytes]) -> list[dict[str, Any]]:
    """The SSE frames' data objects, each checked against its ``event:`` line."""
    out = []
    for frame in frames:
        head, data = frame.decode().split("\n", 1)
        event = orjson.loads(data.removeprefix("data: "))
        assert head == "event: " + event["type"]
        out.append(event)
    return out


# --- items: parsing and rendering back --------------------------------------------------------


def test_a_tool_output_is_a_tool_message_with_its_output_text() -> None:
    """A ``function_call_output`` is a ``tool`` message answering its ``call_id``, its
    ``output`` the text priced, capped and sent."""
    request = _request(
        input=[
            {"role": "user", "content": "list"},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt b.txt"},
        ]
    )
    tool = request.messages[-1]
    assert (tool.role, tool.tool_call_id, tool.text) == ("tool", "c1", "a.txt b.txt")


def test_messages_the_fit_left_alone_are_rendered_as_the_clients_own_items() -> None:
    """render_items: "Messages fitting left alone are the client's own items (the very
    objects)" — a native route's rewritten ``input`` keeps every untouched item's bytes."""
    items = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    ]
    request = _request(input=items)
    out = render_items(request, request.messages)
    assert len(out) == 2 and all(a is b for a, b in zip(out, items, strict=True))


def test_a_changed_user_message_is_rendered_as_input_parts() -> None:
    """A message the fit rewrote (an offloaded image, an elision marker) is rendered from its
    parts in the Responses input shape: ``input_text`` parts with their ``text``, images as
    ``input_image``."""
    request = _request(input=[{"role": "user", "content": "look"}])
    (message,) = request.messages
    changed = replace(message, parts=(TextPart("[image]"), ImagePart(PNG_URL)), wire=None)
    assert render_items(request, [changed]) == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "[image]"},
                {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
            ],
        }
    ]


def test_function_tools_inside_a_namespace_are_priced_as_functions() -> None:
    """docs/wires.md: "function tools (also inside a ``namespace``) by the function-schema
    rule"."""
    inner = {"type": "function", "name": "grep", "parameters": {"type": "object"}}
    request = _request(tools=[{"type": "namespace", "name": "fs", "tools": [inner]}])
    assert request.tools == (inner,)


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"model": "m", "input": [3]}, "input[0]", "input[0] must be an object"),
        ({"model": "m", "input": "hi", "tools": {}}, "tools", "tools must be a list"),
    ],
    ids=["item", "tools"],
)
def test_a_refusal_names_the_parameter_and_says_what_it_must_be(
    body: Any, param: str, message: str
) -> None:
    """``parse_responses`` raises a RequestError naming the bad parameter (its ``param``, the
    400's) and saying what it must be."""
    refusal = _refusal(body)
    assert (refusal.param, refusal.message) == (param, message)


# --- translation: the chat request ---------------------------------------------------------


def test_a_translated_request_carries_the_conversation_and_the_tools_to_chat() -> None:
    """On a route that speaks chat only: ``instructions`` is the system message, a call and its
    output are an assistant ``tool_calls`` and a ``tool`` message, an image an ``image_url``
    part; function tools keep their description, a ``custom`` tool "becomes a function with one
    string parameter ``input``" (docs/wires.md), and ``tool_choice`` is carried."""
    request = _request(
        instructions="You are terse.",
        input=[
            {"role": "user", "content": [{"type": "input_image", "image_url": PNG_URL}]},
            {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "contents"},
        ],
        tools=TOOLS,
        tool_choice="required",
    )
    body = chat_body(request, request.messages, stream=False)
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": PNG_URL, "detail": "auto"}}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "contents"},
    ]
    assert body["tools"] == [
        {"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}},
        {
            "type": "function",
            "function": {
                "name": "apply_patch",
                "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
                "description": "Apply a patch.",
            },
        },
    ]
    assert body["tool_choice"] == "required"


def test_a_json_schema_output_format_is_chats_response_format() -> None:
    """``text.format`` of type ``json_schema`` is chat's ``response_format`` of that type, the
    schema's name and body as chat spells them."""
    fmt = {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True}
    body = chat_body(_request(text={"format": fmt}), _request().messages, stream=False)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
    }


# --- translation: the answer -------------------------------------------------------------------


USAGE = {
    "prompt_tokens": 20,
    "completion_tokens": 5,
    "total_tokens": 25,
    "completion_tokens_details": {"reasoning_tokens": 2},
}


def test_a_translated_answer_reports_its_usage_in_the_responses_shape() -> None:
    """A chat completion's usage is the Response's ``usage``: input, output and total tokens
    (the client bills and budgets by them)."""
    data = {
        "choices": [{"message": {"content": "done"}, "finish_reason": "stop"}],
        "usage": USAGE,
    }
    out = chat_to_response(_request(), data, RID)
    assert out["usage"] == {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 25,
    }
    assert [item["type"] for item in out["output"]] == ["message"]


def test_a_custom_tools_call_comes_back_as_a_custom_tool_call() -> None:
    """docs/wires.md: a custom tool's "call comes back as a ``custom_tool_call``" (its input the
    string it was given, its id ``ctc_``-prefixed as OpenAI's are); a function's call is a
    completed ``function_call`` (``fc_``)."""
    calls = [
        {"id": "c1", "function": {"name": "apply_patch", "arguments": '{"input": "*** patch"}'}},
        {"id": "c2", "function": {"name": "read_file", "arguments": '{"path": "a"}'}},
    ]
    data = {"choices": [{"message": {"content": None, "tool_calls": calls}}]}
    out = chat_to_response(_request(tools=TOOLS), data, RID)
    assert out["output"] == [
        {
            "type": "custom_tool_call",
            "id": "ctc_c1",
            "call_id": "c1",
            "name": "apply_patch",
            "input": "*** patch",
            "status": "completed",
        },
        {
            "type": "function_call",
            "id": "fc_c2",
            "call_id": "c2",
            "name": "read_file",
            "arguments": '{"path": "a"}',
            "status": "completed",
        },
    ]


def test_a_translated_stream_is_the_responses_event_sequence() -> None:
    """Chat chunks in, the Responses event sequence out, as the openai SDK's stream helpers
    read it: created and in_progress, the text item added, its part added, each delta at its
    output and content index, the text done with the whole text, a call's item added at the
    next output index with its arguments' delta and done, and the final response with usage;
    sequence numbers count from 0."""
    stream = ChatStreamToResponses(_request(tools=TOOLS), RID)
    call = {"index": 0, "id": "c1", "function": {"name": "read_file", "arguments": '{"path"'}}
    more = {"index": 0, "function": {"arguments": ': "a"}'}}
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": "Read"}}]},
        {"choices": [{"index": 0, "delta": {"content": "ing."}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [more]}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": USAGE},
    ]
    frames = stream.start()
    for chunk in chunks:
        frames += stream.chunk(chunk)
    closing, final = stream.finish_events()
    events = _events([*frames, *closing, stream.end_event(final)])
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    by_type = [e["type"] for e in events]
    assert by_type == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    msg = "msg_" + RID[5:]
    assert events[3]["part"] == {"type": "output_text", "text": "", "annotations": []}
    for e in events[3:8]:
        assert (e["item_id"], e["output_index"], e["content_index"]) == (msg, 0, 0)
    assert [e["delta"] for e in events[4:6]] == ["Read", "ing."]
    assert events[6]["text"] == "Reading."
    assert events[9]["output_index"] == 1 and events[9]["item"]["call_id"] == "c1"
    assert events[10]["delta"] == events[11]["arguments"] == '{"path": "a"}'
    assert (events[10]["output_index"], events[10]["item_id"]) == (1, "fc_c1")
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["message", "function_call"]
    assert output[1]["call_id"] == "c1" and output[1]["name"] == "read_file"
    assert events[-1]["response"]["usage"]["total_tokens"] == 25
