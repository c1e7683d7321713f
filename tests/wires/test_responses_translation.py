"""What the Responses wire's items and chat translation promise, field by field.

``responses_items`` reads a Responses body into fitting's messages (what is priced: each item's
parts, tool calls and tools) and renders a fitted conversation back as items;
``responses_translate`` turns a Responses request into a chat-completions body for a route that
speaks chat, and the chat answer — whole or streamed — back into a Response object or the
Responses event stream. These tests pin the shapes a client (or the provider) sees, as the two
modules' docstrings, docs/wires.md's Responses section and OpenAI's public Responses API define
them, so that a small change anywhere in the mapping fails a test (docs/mutation.md, the
``responses`` group).
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.messages import ChatRequest, ImagePart, Message, RequestError, TextPart, ToolCall
from proxy.wires.responses_items import (
    GROUP,
    INSTRUCTIONS,
    input_items,
    parse_responses,
    render_items,
    response_tools,
)
from proxy.wires.responses_translate import (
    ChatStreamToResponses,
    chat_body,
    chat_to_response,
    new_response_id,
    response_object,
    response_usage,
    sse_event,
)
from strategies.mask import mask_output

RID = "resp_" + "cd" * 24
MSG_ID = "msg_" + RID[5:]
PNG = "data:image/png;base64,iVBORw0KGgo="
FN_TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    "strict": True,
}
CUSTOM_TOOL = {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}


def _req(**fields: Any) -> ChatRequest:
    return parse_responses({"model": "chatonly", "input": "hi", **fields})


def _chat(stream: bool = False, **fields: Any) -> dict[str, Any]:
    request = _req(**fields)
    return chat_body(request, request.messages, stream)


def _refused(body: Any) -> tuple[str, str | None]:
    with pytest.raises(RequestError) as caught:
        parse_responses(body)
    return caught.value.message, caught.value.param


def _events(frames: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for frame in frames:
        assert frame.endswith(b"\n\n")
        head, data = frame.decode().split("\n", 1)
        event = orjson.loads(data.removeprefix("data: "))
        assert head == "event: " + event["type"]
        out.append(event)
    return out


def _run(request: ChatRequest, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The whole event sequence a translated stream writes for ``chunks``."""
    t = ChatStreamToResponses(request, RID)
    frames = t.start()
    for chunk in chunks:
        frames += t.chunk(chunk)
    closing, final = t.finish_events()
    return _events([*frames, *closing, t.end_event(final)])


def _delta(**delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta}]}


# --- responses_items: reading input ------------------------------------------------------------


def test_a_string_input_is_one_user_message_and_no_input_is_refused() -> None:
    """``input_items``: a string is one user message; a missing input is no items (refused by
    parse_responses as empty); anything else but a list is refused naming ``input``."""
    assert input_items({"input": "yo"}) == [{"role": "user", "content": "yo"}]
    assert input_items({}) == []
    items = [{"role": "user", "content": "a"}]
    assert input_items({"input": items}) is items
    assert _refused({"model": "m"}) == ("input must not be empty", "input")
    assert _refused({"model": "m", "input": []}) == ("input must not be empty", "input")
    assert _refused({"model": "m", "input": 3}) == (
        "input must be a string or a list of items",
        "input",
    )


@pytest.mark.parametrize("kind", [None, 3, [], {}, ["input_text"]])
def test_a_part_whose_type_is_not_a_string_is_refused_naming_it(kind: Any) -> None:
    """A list or an object as a part's ``type`` was a 500 (an unhashable lookup)."""
    part = {"type": kind, "text": "hi"}
    body = {"model": "m", "input": [{"role": "user", "content": [part]}]}
    assert _refused(body) == (
        "input[0].content[0].type must be a string",
        "input[0].content[0].type",
    )


def test_message_parts_are_priced_as_their_text_images_and_json() -> None:
    """Every text-bearing part kind is its text, a refusal its refusal text, an image an image
    part (``file_id`` images priced as ``file_id:...``), an ``input_file`` (any other kind) its
    compact sorted JSON; an empty string content is no part."""
    file_part = {"type": "input_file", "filename": "a.pdf", "file_data": "x"}
    content = [
        {"type": "input_text", "text": "a"},
        {"type": "output_text", "text": "b"},
        {"type": "text", "text": "c"},
        {"type": "summary_text", "text": "d"},
        {"type": "reasoning_text", "text": "e"},
        {"type": "refusal", "refusal": "f"},
        {"type": "input_image", "image_url": PNG, "detail": "low"},
        {"type": "input_image", "file_id": "file-1"},
        file_part,
    ]
    request = _req(input=[{"role": "user", "content": content}, {"role": "user", "content": ""}])
    first, empty = request.messages
    assert (first.role, first.wire) == ("user", request.body["input"][0])
    assert first.parts == (
        *(TextPart(t) for t in "abcdef"),
        ImagePart(PNG, "low"),
        ImagePart("file_id:file-1", "auto"),
        TextPart('{"file_data":"x","filename":"a.pdf","type":"input_file"}'),
    )
    assert empty.parts == ()
    none = _req(input=[{"role": "system", "content": None}]).messages[0]
    assert (none.role, none.parts) == ("system", ())


@pytest.mark.parametrize(
    ("item", "message", "param"),
    [
        (3, "input[0] must be an object", "input[0]"),
        ({"content": "x"}, "input[0].type is required", "input[0].type"),
        ({"type": 7}, "input[0].type is required", "input[0].type"),
        (
            {"role": "tool", "content": "x"},
            "input[0].role must be one of ['assistant', 'developer', 'system', 'user']",
            "input[0].role",
        ),
        ({"role": "user"}, "input[0].content is required", "input[0].content"),
        (
            {"role": "user", "content": 5},
            "input[0].content must be a string or a list of content parts",
            "input[0].content",
        ),
        ({"role": "user", "content": ["x"]}, "input[0].content[0] must be an object", None),
        (
            {"role": "user", "content": [{"type": 1}]},
            "input[0].content[0].type must be a string",
            "input[0].content[0].type",
        ),
        (
            {"role": "user", "content": [{"type": "input_text", "text": 1}]},
            "input[0].content[0].text must be a string",
            "input[0].content[0].text",
        ),
        (
            {"role": "user", "content": [{"type": "refusal"}]},
            "input[0].content[0].refusal must be a string",
            "input[0].content[0].refusal",
        ),
        (
            {"role": "user", "content": [{"type": "input_image"}]},
            "input[0].content[0].image_url must be a string",
            "input[0].content[0].image_url",
        ),
        (
            {"role": "user", "content": [{"type": "input_image", "image_url": PNG, "detail": "x"}]},
            "input[0].content[0].detail must be one of ['auto', 'high', 'low', 'original']",
            "input[0].content[0].detail",
        ),
        (
            {"type": "function_call", "name": "f", "arguments": "{}"},
            "input[0].call_id must be a string",
            "input[0].call_id",
        ),
        (
            {"type": "function_call", "call_id": "c", "arguments": "{}"},
            "input[0].name must be a string",
            "input[0].name",
        ),
        (
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": {}},
            "input[0].arguments must be a string",
            "input[0].arguments",
        ),
        (
            {"type": "custom_tool_call", "name": "f", "input": "x"},
            "input[0].call_id must be a string",
            "input[0].call_id",
        ),
        (
            {"type": "custom_tool_call", "call_id": "c", "input": "x"},
            "input[0].name must be a string",
            "input[0].name",
        ),
        (
            {"type": "custom_tool_call", "call_id": "c", "name": "f", "input": 1},
            "input[0].input must be a string",
            "input[0].input",
        ),
        (
            {"type": "function_call_output", "output": "x"},
            "input[0].call_id must be a string",
            "input[0].call_id",
        ),
        (
            {"type": "reasoning", "summary": "x"},
            "input[0].summary must be a list",
            "input[0].summary",
        ),
        (
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": 2}]},
            "input[0].summary[0].text must be a string",
            "input[0].summary[0].text",
        ),
    ],
)
def test_a_bad_item_is_refused_naming_its_path(item: Any, message: str, param: Any) -> None:
    """parse_responses raises a RequestError whose message says what the field must be and whose
    ``param`` (the 400's) is the field's JSON path, items numbered from 0."""
    got_message, got_param = _refused({"model": "m", "input": [item]})
    assert got_message == message
    assert got_param == (param or message.split(" ")[0])


def test_error_paths_number_the_item_where_it_stands() -> None:
    """A bad item's path carries its own index in ``input`` (not the first item's)."""
    items = [{"role": "user", "content": "a"}, {"type": "function_call_output"}]
    assert _refused({"model": "m", "input": items})[1] == "input[1].call_id"


@pytest.mark.parametrize(
    ("fields", "message", "param"),
    [
        ({"model": 3}, "model must be a string", "model"),
        ({"instructions": 3}, "instructions must be a string", "instructions"),
        ({"stream": "yes"}, "stream must be a boolean", "stream"),
        ({"store": 1}, "store must be a boolean", "store"),
        ({"max_output_tokens": 0}, "max_output_tokens must be a positive integer", None),
        ({"max_output_tokens": True}, "max_output_tokens must be a positive integer", None),
        ({"max_output_tokens": 2.5}, "max_output_tokens must be a positive integer", None),
        ({"tools": {}}, "tools must be a list", "tools"),
        ({"tools": [3]}, "tools[0] must be an object with a type", "tools[0]"),
        ({"tools": [{"name": "x"}]}, "tools[0] must be an object with a type", "tools[0]"),
        ({"tools": [{"type": "function"}]}, "tools[0].name must be a string", "tools[0].name"),
        (
            {"tools": [{"type": "namespace", "tools": {}}]},
            "tools[0].tools must be a list",
            "tools[0].tools",
        ),
        (
            {"tools": [FN_TOOL, {"type": "namespace", "tools": [FN_TOOL, {"type": "function"}]}]},
            "tools[1].tools[1].name must be a string",
            "tools[1].tools[1].name",
        ),
    ],
)
def test_a_bad_top_level_field_is_refused_naming_it(
    fields: dict[str, Any], message: str, param: Any
) -> None:
    """Top-level fields are validated with the same naming: model, instructions, the booleans,
    the output cap (a positive integer, not a bool) and the tools (a namespace's by path)."""
    assert _refused({"model": "m", "input": "hi", **fields}) == (message, param or message[:17])


def test_a_body_that_is_not_an_object_is_refused_without_a_param() -> None:
    """A body that is not a JSON object is refused as a whole (no param)."""
    assert _refused([1]) == ("the request body must be a JSON object", None)


def test_the_request_carries_model_instructions_cap_and_body() -> None:
    """parse_responses: ``instructions`` is a leading system message whose wire marks it as the
    instructions; the model, the output cap (1 is allowed) and the very body are kept."""
    body = {"model": "x", "input": "hi", "instructions": "Be terse.", "max_output_tokens": 1}
    request = parse_responses(body)
    assert request.model == "x" and request.body is body and request.max_output_tokens == 1
    first, user = request.messages
    assert (first.role, first.parts, first.wire) == (
        "system",
        (TextPart("Be terse."),),
        {INSTRUCTIONS: "Be terse."},
    )
    assert (user.role, user.text) == ("user", "hi")
    assert parse_responses({"input": "hi"}).model == ""
    assert (
        parse_responses({"input": "hi", "stream": True, "store": False}).max_output_tokens is None
    )


def test_model_side_items_form_one_assistant_message_with_their_calls() -> None:
    """A run of model-side items is ONE assistant message whose wire holds them verbatim, its
    tool calls the ``*_call`` items with a call_id (a function's arguments, a custom call's
    input, another call's JSON without id/call_id/status); it is priced as its messages' text, a
    reasoning item's summary, and other items' compact JSON. A user message or an output ends
    the run."""
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "think"}],
        "encrypted_content": "opaque",
    }
    said = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "ok"}],
    }
    fn = {"type": "function_call", "call_id": "c1", "name": "read_file"}
    custom = {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "p"}
    shell = {"type": "local_shell_call", "id": "ls", "call_id": "c3", "status": "x", "action": 1}
    search = {"type": "web_search_call", "id": "ws", "status": "completed"}
    items = [
        {"role": "user", "content": "go"},
        reasoning,
        said,
        fn,
        custom,
        shell,
        search,
        {"type": "function_call_output", "call_id": "c1", "output": "data"},
        {"type": "reasoning", "summary": None},
    ]
    request = _req(input=items)
    user, group, tool, tail = request.messages
    assert user.role == "user"
    assert group.role == "assistant"
    assert group.wire == {GROUP: (reasoning, said, fn, custom, shell, search)}
    assert all(a is b for a, b in zip(group.wire[GROUP], items[1:7], strict=True))
    assert group.parts == (
        TextPart("think"),
        TextPart("ok"),
        TextPart('{"action":1,"call_id":"c3","id":"ls","status":"x","type":"local_shell_call"}'),
        TextPart('{"id":"ws","status":"completed","type":"web_search_call"}'),
    )
    assert group.tool_calls == (
        ToolCall("c1", "read_file", ""),
        ToolCall("c2", "apply_patch", "p"),
        ToolCall("c3", "local_shell_call", '{"action":1,"type":"local_shell_call"}'),
    )
    assert (tool.role, tool.tool_call_id, tool.text) == ("tool", "c1", "data")
    assert (tail.role, tail.parts, tail.tool_calls) == ("assistant", (), ())


def test_custom_tool_call_without_input_is_an_empty_call() -> None:
    """A custom call's input defaults to the empty string (as a function call's arguments)."""
    item = {"type": "custom_tool_call", "call_id": "c", "name": "t"}
    (group,) = [m for m in _req(input=[item]).messages if m.role == "assistant"]
    assert group.tool_calls == (ToolCall("c", "t", ""),)


def test_a_custom_call_without_input_reaches_chat_with_an_empty_input() -> None:
    """On a translated route a custom call is a function call whose one string parameter is
    ``input`` (docs/wires.md): a call without input carries ``{"input": ""}``, a string as the
    function's schema says, never ``null``."""
    item = {"type": "custom_tool_call", "call_id": "c", "name": "t"}
    (assistant,) = [m for m in _chat(input=[item])["messages"] if m["role"] == "assistant"]
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"input":""}'


def test_tool_outputs_of_every_kind_are_tool_messages_priced_by_their_output() -> None:
    """Any ``*_call_output`` is a tool message answering its call_id: a string output is its
    text (empty: nothing), a list its parts, anything else its compact JSON."""
    items = [
        {"type": "custom_tool_call_output", "call_id": "a", "output": "text"},
        {"type": "function_call_output", "call_id": "b", "output": ""},
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": [
                {"type": "input_text", "text": "t"},
                {"type": "input_image", "image_url": PNG},
            ],
        },
        {"type": "local_shell_call_output", "call_id": "d", "output": {"z": 1, "a": 2}},
        {"type": "function_call_output", "call_id": "e"},
    ]
    messages = _req(input=items).messages
    assert [(m.role, m.tool_call_id, m.parts) for m in messages] == [
        ("tool", "a", (TextPart("text"),)),
        ("tool", "b", ()),
        ("tool", "c", (TextPart("t"), ImagePart(PNG))),
        ("tool", "d", (TextPart('{"a":2,"z":1}'),)),
        ("tool", "e", ()),
    ]
    assert all(m.wire is item for m, item in zip(messages, items, strict=True))


def test_tools_are_priced_functions_as_functions_others_as_their_json() -> None:
    """response_tools: function tools as they are (a namespace's too, flattened), every other
    kind keyed by its type around its whole JSON (no top-level name); no tools is ()."""
    web = {"type": "web_search"}
    ns = {"type": "namespace", "name": "fs", "tools": [FN_TOOL, CUSTOM_TOOL]}
    assert response_tools({"tools": [web, ns]}) == (
        {"type": "web_search", "web_search": web},
        FN_TOOL,
        {"type": "custom", "custom": CUSTOM_TOOL},
    )
    assert response_tools({}) == () and response_tools({"tools": None}) == ()
    assert _req(tools=[FN_TOOL]).tools == (FN_TOOL,)


# --- responses_items: rendering back -----------------------------------------------------------


def test_a_masked_tool_output_keeps_its_item_type_and_fields_with_the_new_text() -> None:
    """A capped or masked output "keep[s] their item type, call id and other fields with the
    capped text" (render_items); the instructions are never an item; untouched items are the
    very objects."""
    call = {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "p"}
    out_item = {"type": "custom_tool_call_output", "id": "o1", "call_id": "c1", "output": "x" * 99}
    request = _req(instructions="sys", input=[{"role": "user", "content": "go"}, call, out_item])
    sys_m, user, group, tool = request.messages
    masked = mask_output(tool, "apply_patch", 42)
    rendered = render_items(request, [sys_m, user, group, masked])
    assert rendered[0] is request.body["input"][0] and rendered[1] is call
    assert rendered[2] == {
        "type": "custom_tool_call_output",
        "id": "o1",
        "call_id": "c1",
        "output": masked.text,
    }
    assert "42" in masked.text and len(rendered) == 3


def test_a_rewritten_tool_message_without_a_wire_is_a_function_call_output() -> None:
    """A tool message the request never had (no wire, unknown call id) renders as a
    ``function_call_output``; one with images keeps them as input parts."""
    request = _req(input=[{"role": "user", "content": "go"}])
    plain = Message(role="tool", parts=(TextPart("a"), TextPart("b")), tool_call_id="zz")
    imaged = Message(role="tool", parts=(TextPart("see"), ImagePart(PNG, "high")), tool_call_id="y")
    assert render_items(request, [plain, imaged]) == [
        {"type": "function_call_output", "call_id": "zz", "output": "ab"},
        {
            "type": "function_call_output",
            "call_id": "y",
            "output": [
                {"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": PNG, "detail": "high"},
            ],
        },
    ]


def test_a_capped_output_takes_the_type_its_call_id_had_in_the_request() -> None:
    """A rewritten output answering a call id of the request gets that output's item type even
    when its own wire no longer names it."""
    items = [
        {"type": "local_shell_call", "call_id": "s1", "action": {}},
        {"type": "local_shell_call_output", "call_id": "s1", "output": "long"},
    ]
    request = _req(input=items)
    group, tool = request.messages
    cut = replace(tool, parts=(TextPart("lo"),), wire={"call_id": "s1", "extra": 1})
    rendered = render_items(request, [group, cut])
    assert rendered[0] is items[0]
    assert rendered[1] == {
        "type": "local_shell_call_output",
        "call_id": "s1",
        "extra": 1,
        "output": "lo",
    }


def test_an_elision_marker_is_a_message_in_its_role() -> None:
    """An elision marker (a new message) renders as a ``message`` of its role, text parts as
    ``input_text`` for input roles and ``output_text`` for the assistant."""
    request = _req()
    user = Message(role="user", parts=(TextPart("[elided]"),))
    said = Message(role="assistant", parts=(TextPart("[elided]"),))
    assert render_items(request, [user, said]) == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "[elided]"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "[elided]"}],
        },
    ]


# --- translation: the chat request -------------------------------------------------------------


def test_the_conversation_becomes_chat_messages_role_by_role() -> None:
    """instructions → the system message; developer → system; user string → string content;
    a text-only part list → its joined text; images → image_url parts beside text parts; a run
    of model-side items → one assistant message (its texts joined, function calls with their
    arguments, ``{}`` when none, custom calls as ``{"input": ...}``); outputs → tool messages
    (an image in a tool output replaced by a note); a run of reasoning only → nothing."""
    items = [
        {"role": "developer", "content": "dev"},
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
        },
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": PNG, "detail": "high"},
            ],
        },
        {"type": "reasoning", "summary": [], "encrypted_content": "e"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "I'll "}]},
        {"type": "message", "role": "assistant", "content": "look."},
        {"type": "function_call", "call_id": "c1", "name": "read_file"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": 'a"b'},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [
                {"type": "input_text", "text": "x"},
                {"type": "input_image", "image_url": PNG},
            ],
        },
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]},
        {"role": "user", "content": "next"},
    ]
    body = _chat(instructions="sys", input=items)
    assert body["model"] == "chatonly"
    assert body["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "system", "content": "dev"},
        {"role": "user", "content": "ab"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": PNG, "detail": "high"}},
            ],
        },
        {
            "role": "assistant",
            "content": "I'll look.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "apply_patch", "arguments": '{"input":"a\\"b"}'},
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "x[image omitted: not supported in tool output]",
        },
        {"role": "tool", "tool_call_id": "c2", "content": "done"},
        {"role": "user", "content": "next"},
    ]


def test_an_assistant_text_turn_has_no_tool_calls_key() -> None:
    """An assistant turn without calls is ``{"role": "assistant", "content": text}`` — no empty
    ``tool_calls`` (chat providers refuse an empty list)."""
    items = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "b"}, {"type": "x"}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"k":1}'},
    ]
    messages = _chat(input=items)["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": "b",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"k":1}'}}
        ],
    }
    only_text = _chat(input=items[:2])["messages"][1]
    assert only_text == {"role": "assistant", "content": "b"}


def test_a_calls_only_turn_is_an_assistant_message_with_null_content() -> None:
    """A run of calls without text is an assistant message with ``content`` null and its
    ``tool_calls`` (chat's shape for a calls-only turn), reasoning before it adding nothing."""
    items = [
        {"role": "user", "content": "a"},
        {"type": "reasoning", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "r"},
    ]
    assert _chat(input=items)["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "r"},
    ]


def test_tools_become_chat_functions_and_others_are_dropped() -> None:
    """Function tools keep name, description, parameters and strict (nothing else); a custom tool
    is a function with one string parameter ``input`` (its description kept, its grammar lost);
    a namespace's tools are flattened, one whose name another tool has too under
    ``<namespace>__<name>`` (tests/wires/test_builtin_tools_hunt.py); web_search and other
    kinds are dropped."""
    described = {**CUSTOM_TOOL, "description": "Patch."}
    tools = [
        {**FN_TOOL, "extra": 1},
        {"type": "web_search"},
        {
            "type": "namespace",
            "name": "ns",
            "tools": [{"type": "function", "name": "g"}, described],
        },
        CUSTOM_TOOL,
    ]
    body = _chat(tools=tools)
    params = {"type": "object", "properties": {"input": {"type": "string"}}}
    assert body["tools"] == [
        {"type": "function", "function": {k: v for k, v in FN_TOOL.items() if k != "type"}},
        {"type": "function", "function": {"name": "g"}},
        {
            "type": "function",
            "function": {"name": "ns__apply_patch", "parameters": params, "description": "Patch."},
        },
        {"type": "function", "function": {"name": "apply_patch", "parameters": params}},
    ]
    assert "tool_choice" not in body


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "name": "read_file"},
            {"type": "function", "function": {"name": "read_file"}},
        ),
        (
            {"type": "custom", "name": "apply_patch"},
            {"type": "function", "function": {"name": "apply_patch"}},
        ),
        ({"type": "function"}, "auto"),
        ({"type": "web_search"}, "auto"),
        ({"type": "allowed_tools", "mode": "auto", "tools": []}, "auto"),
    ],
)
def test_tool_choice_forms_map_to_chats(choice: Any, expected: Any) -> None:
    """tool_choice: the string modes as they are; a named function or custom tool is chat's
    named function; any other object (a hosted tool, allowed_tools, no name) is ``auto``."""
    assert _chat(tools=[FN_TOOL, CUSTOM_TOOL], tool_choice=choice)["tool_choice"] == expected


def test_tool_choice_is_dropped_when_no_tool_reaches_chat() -> None:
    """Without chat tools (none sent, or only hosted ones) there is no tool_choice (a provider
    refuses a tool_choice without tools)."""
    assert "tool_choice" not in _chat(tool_choice="required")
    body = _chat(tools=[{"type": "web_search"}], tool_choice="required")
    assert "tools" not in body and "tool_choice" not in body


def test_sampling_settings_and_the_output_cap_are_carried() -> None:
    """temperature, top_p, parallel_tool_calls and user are carried as they are, the output cap
    as ``max_tokens``; Responses-only settings (prompt_cache_key, reasoning, store, include,
    metadata, text.verbosity, ...) are not; unset (null) settings are absent."""
    body = _chat(
        temperature=0.3,
        top_p=0.9,
        parallel_tool_calls=False,
        user="u1",
        max_output_tokens=77,
        prompt_cache_key="k",
        reasoning={"effort": "high"},
        store=False,
        include=["reasoning.encrypted_content"],
        metadata={"a": "b"},
        text={"verbosity": "low"},
        previous_response_id=None,
    )
    assert body == {
        "model": "chatonly",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.3,
        "top_p": 0.9,
        "parallel_tool_calls": False,
        "user": "u1",
        "max_tokens": 77,
    }
    assert _chat(temperature=None, top_p=0) == {
        "model": "chatonly",
        "messages": [{"role": "user", "content": "hi"}],
        "top_p": 0,
    }


def test_output_formats_map_to_response_format() -> None:
    """text.format json_schema → response_format json_schema (all but its type); json_object →
    json_object; plain text or no format → no response_format."""
    fmt = {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True}
    assert _chat(text={"format": fmt})["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": True},
    }
    assert _chat(text={"format": {"type": "json_object"}})["response_format"] == {
        "type": "json_object"
    }
    for text in ({"format": {"type": "text"}}, {}, "x", {"format": "json_object"}):
        assert "response_format" not in _chat(text=text)


def test_a_stream_asks_chat_for_usage() -> None:
    """A streamed request is a streamed chat request with ``include_usage`` (the final event's
    usage comes from chat's usage chunk); a whole one has neither field."""
    assert _chat(stream=True)["stream"] is True
    assert _chat(stream=True)["stream_options"] == {"include_usage": True}
    whole = _chat(stream=False)
    assert "stream" not in whole and "stream_options" not in whole


# --- translation: the answer -------------------------------------------------------------------


def test_response_ids_are_resp_and_48_hex() -> None:
    """new_response_id: ``resp_`` and 24 random bytes in hex, a fresh one each time."""
    a, b = new_response_id(), new_response_id()
    assert re.fullmatch(r"resp_[0-9a-f]{48}", a) and a != b


def test_usage_is_reported_in_the_responses_shape() -> None:
    """Chat usage → input/output/total tokens, cached tokens from prompt_tokens_details,
    reasoning tokens from completion_tokens_details (0 when absent or null); no usage → None."""
    usage = {
        "prompt_tokens": 30,
        "completion_tokens": 7,
        "total_tokens": 37,
        "prompt_tokens_details": {"cached_tokens": 12},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    assert response_usage(usage) == {
        "input_tokens": 30,
        "input_tokens_details": {"cached_tokens": 12},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 37,
    }
    bare = response_usage({"prompt_tokens": 4, "completion_tokens": 1})
    assert bare is not None and bare["output_tokens_details"] == {"reasoning_tokens": 0}
    assert bare["total_tokens"] == 5 and bare["input_tokens_details"] == {"cached_tokens": 0}
    null = {
        "prompt_tokens": 4,
        "completion_tokens": 1,
        "completion_tokens_details": {"reasoning_tokens": None},
    }
    assert response_usage(null)["output_tokens_details"] == {"reasoning_tokens": 0}  # type: ignore[index]
    assert response_usage(None) is None and response_usage({"foo": 1}) is None


def test_a_text_answer_is_a_completed_response_echoing_the_request() -> None:
    """A chat answer's text is one completed assistant ``message`` item (id ``msg_`` + the
    response id's hex, one ``output_text`` part without annotations); the Response echoes the
    request's settings with OpenAI's defaults (parallel_tool_calls and store true, tool_choice
    auto, tools and metadata empty)."""
    request = _req(instructions="sys", max_output_tokens=50, temperature=0.5, top_p=0.8)
    data = {"choices": [{"message": {"content": "Hello"}, "finish_reason": "stop"}]}
    before = int(time.time())
    out = chat_to_response(request, data, RID)
    assert before <= out.pop("created_at") <= int(time.time())
    assert out == {
        "id": RID,
        "object": "response",
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": "sys",
        "max_output_tokens": 50,
        "model": "chatonly",
        "output": [
            {
                "type": "message",
                "id": MSG_ID,
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "store": True,
        "temperature": 0.5,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 0.8,
        "usage": None,
        "metadata": {},
    }


def test_the_response_echoes_the_clients_own_settings() -> None:
    """Settings the client set are echoed as set (not the defaults)."""
    tools = [FN_TOOL]
    request = _req(
        parallel_tool_calls=False,
        store=False,
        tool_choice="required",
        tools=tools,
        metadata={"k": "v"},
        previous_response_id="resp_prev",
    )
    out = response_object(request, RID, [], None, "in_progress")
    assert (out["status"], out["output"], out["usage"]) == ("in_progress", [], None)
    assert out["parallel_tool_calls"] is False and out["store"] is False
    assert out["tool_choice"] == "required" and out["tools"] == tools
    assert out["metadata"] == {"k": "v"} and out["previous_response_id"] == "resp_prev"


def test_calls_come_back_as_function_and_custom_tool_calls() -> None:
    """Tool calls follow the text in order: a function's as ``function_call`` (``fc_`` id, its
    arguments verbatim), a custom tool's as ``custom_tool_call`` (``ctc_`` id, the ``input``
    string out of its JSON arguments; arguments that are not a JSON object are the input as
    they are; a non-string input is its JSON)."""
    calls = [
        {"id": "a", "function": {"name": "read_file", "arguments": '{"path":"x"}'}},
        {"id": "b", "function": {"name": "apply_patch", "arguments": '{"input":"P"}'}},
        {"id": "c", "function": {"name": "apply_patch", "arguments": "raw patch"}},
        {"id": "d", "function": {"name": "apply_patch", "arguments": "[1]"}},
        {"id": "e", "function": {"name": "apply_patch", "arguments": '{"input":[1,2]}'}},
        {"id": "f", "function": {"name": "apply_patch", "arguments": ""}},
        {"id": "g", "function": {"name": "read_file"}},
    ]
    data = {
        "choices": [
            {"message": {"content": "Sure", "tool_calls": calls}, "finish_reason": "tool_calls"}
        ]
    }
    out = chat_to_response(_req(tools=[FN_TOOL, CUSTOM_TOOL]), data, RID)
    assert out["status"] == "completed" and out["incomplete_details"] is None
    assert out["output"][0]["type"] == "message"

    def custom(cid: str, text: str) -> dict[str, Any]:
        return {
            "type": "custom_tool_call",
            "id": "ctc_" + cid,
            "call_id": cid,
            "name": "apply_patch",
            "input": text,
            "status": "completed",
        }

    def fn(cid: str, args: str) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": "fc_" + cid,
            "call_id": cid,
            "name": "read_file",
            "arguments": args,
            "status": "completed",
        }

    assert out["output"][1:] == [
        fn("a", '{"path":"x"}'),
        custom("b", "P"),
        custom("c", "raw patch"),
        custom("d", "[1]"),
        custom("e", "[1,2]"),
        custom("f", ""),
        fn("g", ""),
    ]


def test_a_namespaced_custom_tools_call_comes_back_as_a_custom_tool_call() -> None:
    """docs/wires.md: a custom tool "becomes a function with one string parameter ``input``, and
    its call comes back as a ``custom_tool_call``"; chat_body flattens a namespace's custom tools
    into such functions, so their calls must come back as custom calls too."""
    ns = {"type": "namespace", "name": "n", "tools": [{**CUSTOM_TOOL, "name": "inner"}]}
    request = _req(tools=[ns])
    assert chat_body(request, request.messages, False)["tools"][0]["function"]["name"] == "inner"
    calls = [{"id": "a", "function": {"name": "inner", "arguments": '{"input":"x"}'}}]
    data = {"choices": [{"message": {"tool_calls": calls}}]}
    (item,) = chat_to_response(request, data, RID)["output"]
    assert (item["type"], item["input"]) == ("custom_tool_call", "x")


def test_a_length_cut_answer_is_incomplete_for_max_output_tokens() -> None:
    """finish_reason ``length`` → status ``incomplete`` with incomplete_details reason
    ``max_output_tokens`` (OpenAI's shape); usage carried."""
    data = {
        "choices": [{"message": {"content": "Hel"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    out = chat_to_response(_req(), data, RID)
    assert out["status"] == "incomplete"
    assert out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["usage"]["total_tokens"] == 5
    assert out["output"][0]["content"][0]["text"] == "Hel"


def test_an_empty_or_odd_answer_is_an_empty_completed_response() -> None:
    """No choices, empty content, or a non-object body: a completed response with no output
    items and no usage (never a crash)."""
    for data in ({}, {"choices": []}, {"choices": [{"message": {"content": ""}}]}, None, []):
        out = chat_to_response(_req(), data, RID)
        assert (out["status"], out["output"], out["usage"]) == ("completed", [], None)


def test_a_content_filtered_answer_is_incomplete_for_content_filter() -> None:
    """OpenAI's Response: an answer cut by the content filter is ``incomplete`` with reason
    ``content_filter`` (incomplete_details.reason is max_output_tokens | content_filter)."""
    data = {"choices": [{"message": {"content": "par"}, "finish_reason": "content_filter"}]}
    out = chat_to_response(_req(), data, RID)
    assert out["status"] == "incomplete"
    assert out["incomplete_details"] == {"reason": "content_filter"}


def test_a_refusal_answer_is_a_message_with_a_refusal_part() -> None:
    """OpenAI's Response carries a model refusal as ``{"type": "refusal", "refusal": ...}`` in
    the assistant message's content; chat carries it as ``message.refusal``."""
    data = {"choices": [{"message": {"content": None, "refusal": "I can't."}}]}
    out = chat_to_response(_req(), data, RID)
    assert out["output"][0]["content"] == [{"type": "refusal", "refusal": "I can't."}]


# --- translation: the stream -------------------------------------------------------------------


def test_sse_event_frames_name_the_event_and_carry_compact_json() -> None:
    """sse_event: ``event: <type>``, ``data: <compact JSON>``, a blank line."""
    assert sse_event("response.created", {"a": 1}) == b'event: response.created\ndata: {"a":1}\n\n'


def test_the_stream_opens_with_created_and_in_progress_shells() -> None:
    """start(): response.created then response.in_progress (sequence 0 and 1), each carrying the
    in-progress Response with the stream's id, no output and no usage."""
    events = _events(ChatStreamToResponses(_req(instructions="s"), RID).start())
    assert [(e["type"], e["sequence_number"]) for e in events] == [
        ("response.created", 0),
        ("response.in_progress", 1),
    ]
    for e in events:
        shell = e["response"]
        assert (shell["id"], shell["status"], shell["output"], shell["usage"]) == (
            RID,
            "in_progress",
            [],
            None,
        )
        assert shell["instructions"] == "s" and shell["object"] == "response"


def test_a_text_stream_is_the_exact_event_sequence() -> None:
    """Text deltas: the message item added (in progress, no content), its output_text part added
    (empty), one delta per non-empty chunk, then text done (whole text), part done, item done
    (completed), and response.completed with the final output and usage; other choices than 0
    and empty deltas write nothing."""
    usage = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        _delta(content="Hel"),
        {"choices": [{"index": 1, "delta": {"content": "IGNORED"}}]},
        _delta(content="lo"),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": usage},
    ]
    events = _run(_req(), chunks)
    assert [e["sequence_number"] for e in events] == list(range(10))
    item = {
        "type": "message",
        "id": MSG_ID,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
    }
    common = {"item_id": MSG_ID, "output_index": 0, "content_index": 0}
    bodies = [{k: v for k, v in e.items() if k != "sequence_number"} for e in events[2:9]]
    assert bodies == [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            **common,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        {"type": "response.output_text.delta", **common, "delta": "Hel"},
        {"type": "response.output_text.delta", **common, "delta": "lo"},
        {"type": "response.output_text.done", **common, "text": "Hello"},
        {"type": "response.content_part.done", **common, "part": item["content"][0]},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    ]
    final = events[-1]
    assert final["type"] == "response.completed"
    assert final["response"]["status"] == "completed"
    assert final["response"]["output"] == [item]
    assert final["response"]["usage"] == response_usage(usage)
    assert final["response"]["incomplete_details"] is None


def test_streamed_calls_are_assembled_and_written_in_index_order() -> None:
    """Tool-call deltas are gathered per call index (id and name from the first delta,
    arguments concatenated); at the end each call is an item added (in progress, empty
    arguments), its arguments' delta and done, and the item done — function calls in index
    order after any text, at consecutive output indexes; a custom tool's call is a
    custom_tool_call item (added with its input, then done) with no arguments events."""
    chunks = [
        _delta(
            tool_calls=[
                {"index": 1, "id": "c2", "function": {"name": "apply_patch", "arguments": '{"in'}}
            ]
        ),
        _delta(
            tool_calls=[
                {"index": 0, "id": "c1", "function": {"name": "read_file", "arguments": ""}}
            ]
        ),
        _delta(
            tool_calls=[
                {"index": 0, "id": None, "function": {"name": None, "arguments": '{"path":'}}
            ]
        ),
        _delta(tool_calls=[{"index": 1, "function": {"arguments": 'put":"P"}'}}]),
        _delta(tool_calls=[{"index": 0, "function": {"arguments": '"a"}'}}]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    events = _run(_req(tools=[FN_TOOL, CUSTOM_TOOL]), chunks)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    fn = {
        "type": "function_call",
        "id": "fc_c1",
        "call_id": "c1",
        "name": "read_file",
        "arguments": '{"path":"a"}',
        "status": "completed",
    }
    custom = {
        "type": "custom_tool_call",
        "id": "ctc_c2",
        "call_id": "c2",
        "name": "apply_patch",
        "input": "P",
        "status": "completed",
    }
    bodies = [{k: v for k, v in e.items() if k != "sequence_number"} for e in events[2:-1]]
    common = {"item_id": "fc_c1", "output_index": 0}
    assert bodies == [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**fn, "status": "in_progress", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", **common, "delta": fn["arguments"]},
        {"type": "response.function_call_arguments.done", **common, "arguments": fn["arguments"]},
        {"type": "response.output_item.done", "output_index": 0, "item": fn},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**custom, "status": "in_progress"},
        },
        {"type": "response.output_item.done", "output_index": 1, "item": custom},
    ]
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"] == [fn, custom]
    assert events[-1]["response"]["usage"] is None


def test_a_length_cut_stream_ends_with_response_incomplete() -> None:
    """finish_reason ``length`` in a stream: the closing event is ``response.incomplete``, its
    response incomplete for max_output_tokens, after the text item is closed."""
    chunks = [
        _delta(content="par"),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
    ]
    events = _run(_req(), chunks)
    assert events[-2]["type"] == "response.output_item.done"
    final = events[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["status"] == "incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["output"][0]["content"][0]["text"] == "par"


def test_a_content_filtered_stream_ends_incomplete_for_content_filter() -> None:
    """finish_reason ``content_filter`` in a stream: ``response.incomplete`` with reason
    ``content_filter``, as a whole answer gets (one mapping for both)."""
    chunks = [
        _delta(content="par"),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]},
    ]
    final = _run(_req(), chunks)[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "content_filter"}


def test_a_streamed_refusal_is_a_refusal_part_with_its_own_events() -> None:
    """Chat streams a refusal as ``delta.refusal``; the Responses stream carries it as a
    ``refusal`` content part: ``response.refusal.delta`` events whose deltas join to
    ``response.refusal.done``'s text, and the final message holds the refusal part — the same
    output a whole answer with ``message.refusal`` gets."""
    events = _run(_req(), [_delta(refusal="I can"), _delta(refusal="'t."), _delta()])
    kinds = [e["type"] for e in events]
    assert "response.output_text.delta" not in kinds
    assert kinds[2:-1] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.refusal.delta",
        "response.refusal.delta",
        "response.refusal.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert events[3]["part"] == {"type": "refusal", "refusal": ""}
    deltas = [e["delta"] for e in events if e["type"] == "response.refusal.delta"]
    done = next(e for e in events if e["type"] == "response.refusal.done")
    assert "".join(deltas) == done["refusal"] == "I can't."
    whole = {"choices": [{"message": {"content": None, "refusal": "I can't."}}]}
    assert events[-1]["response"]["output"] == chat_to_response(_req(), whole, RID)["output"]


def test_an_empty_stream_still_opens_and_completes() -> None:
    """A chat stream without content nor calls: created, in_progress, completed (with an empty
    output) — the client always sees a terminal event."""
    events = _run(_req(), [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}])
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    assert events[-1]["response"]["output"] == [] and events[-1]["sequence_number"] == 2


def test_the_last_usage_chunk_wins_and_an_empty_one_is_ignored() -> None:
    """The final response carries the usage of chat's usage chunk; a chunk with null or empty
    usage does not erase it."""
    usage = {"prompt_tokens": 5, "completion_tokens": 1}
    chunks = [{"choices": [], "usage": usage}, {"choices": [], "usage": None}, {"usage": {}}]
    assert _run(_req(), chunks)[-1]["response"]["usage"] == response_usage(usage)


# --- properties --------------------------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)


@st.composite
def _chat_stream(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[str], dict[int, str]]:
    """A chat stream: text deltas and several calls' argument deltas, interleaved."""
    texts = draw(st.lists(_TEXT, max_size=6))
    n_calls = draw(st.integers(0, 3))
    args = {k: draw(st.lists(_TEXT, max_size=4)) for k in range(n_calls)}
    chunks: list[dict[str, Any]] = [_delta(content=t) for t in texts]
    for k, pieces in args.items():
        head = {"index": k, "id": f"call{k}", "function": {"name": f"f{k}", "arguments": ""}}
        pos = draw(st.integers(0, len(chunks)))
        chunks.insert(pos, _delta(tool_calls=[head]))
        last = pos
        for piece in pieces:
            last = draw(st.integers(last + 1, len(chunks)))
            chunks.insert(last, _delta(tool_calls=[{"index": k, "function": {"arguments": piece}}]))
    finish = draw(st.sampled_from(["stop", "length", "tool_calls"]))
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return chunks, texts, {k: "".join(p) for k, p in args.items()}


@settings(max_examples=60, deadline=None)
@given(_chat_stream())
def test_a_stream_reassembles_into_its_final_response(
    stream: tuple[list[dict[str, Any]], list[str], dict[int, str]],
) -> None:
    """Whatever the interleaving: sequence numbers are 0..n-1; the text deltas concatenate to
    the output text of the final response, each call's argument deltas to its final arguments;
    every item is added then done at the same output index, indexes 0,1,2,... in output order;
    the closing event's response is the whole output."""
    chunks, texts, args = stream
    events = _run(_req(), chunks)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    status = final["status"]
    assert events[-1]["type"] == (
        "response.incomplete" if status == "incomplete" else "response.completed"
    )
    text = "".join(texts)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == text
    messages = [i for i in final["output"] if i["type"] == "message"]
    if text:
        assert [m["content"][0]["text"] for m in messages] == [text]
    else:
        assert messages == []
    calls = [i for i in final["output"] if i["type"] == "function_call"]
    assert [c["call_id"] for c in calls] == [f"call{k}" for k in sorted(args)]
    for call in calls:
        pieces = [
            e["delta"]
            for e in events
            if e["type"] == "response.function_call_arguments.delta" and e["item_id"] == call["id"]
        ]
        assert "".join(pieces) == call["arguments"] == args[int(call["call_id"][4:])]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in added] == list(range(len(final["output"])))
    assert [e["output_index"] for e in done] == list(range(len(final["output"])))
    assert [e["item"] for e in done] == final["output"]
    assert [e["item"]["id"] for e in added] == [i["id"] for i in final["output"]]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["read_file", "apply_patch"]), _TEXT), max_size=4),
    _TEXT,
)
def test_a_whole_answer_matches_the_streamed_one(calls: list[tuple[str, str]], text: str) -> None:
    """The same chat answer whole and streamed gives the same Response output (a client reading
    either sees the same items)."""
    request = _req(tools=[FN_TOOL, CUSTOM_TOOL])
    tool_calls = [
        {
            "id": f"c{k}",
            "function": {"name": name, "arguments": orjson.dumps({"input": a}).decode()},
        }
        for k, (name, a) in enumerate(calls)
    ]
    whole = chat_to_response(
        request, {"choices": [{"message": {"content": text, "tool_calls": tool_calls}}]}, RID
    )
    chunks = [_delta(content=text)] + [
        _delta(tool_calls=[{"index": k, **c}]) for k, c in enumerate(tool_calls)
    ]
    streamed = _run(request, chunks)[-1]["response"]
    assert streamed["output"] == whole["output"]
    customs = [i for i in whole["output"] if i["type"] == "custom_tool_call"]
    assert [i["input"] for i in customs] == [a for name, a in calls if name == "apply_patch"]


def test_an_output_whose_call_chat_never_sees_is_not_sent_to_chat() -> None:
    """Chat refuses a ``tool`` message that answers no call of an assistant message before it.
    A call chat cannot make (``local_shell_call``, a server-side ``*_call``) is not translated
    (docs/wires.md), so its output is not sent either; a function call and its output are."""
    items = [
        {"role": "user", "content": "list the files"},
        {"type": "local_shell_call", "call_id": "s1", "action": {"command": ["ls"]}},
        {"type": "local_shell_call_output", "call_id": "s1", "output": "a.py"},
        {"type": "function_call", "call_id": "f1", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": "print(1)"},
    ]
    messages = _chat(input=items)["messages"]
    called = {c["id"] for m in messages for c in m.get("tool_calls") or []}
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert answered == ["f1"]
    assert called == {"f1"}
