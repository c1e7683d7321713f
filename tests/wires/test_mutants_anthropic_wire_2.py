"""The Anthropic wire's parser and writer at more points its properties do not read.

The second round of ``test_mutants_anthropic_wire.py`` (issue 35): the survivors of a fresh
40-mutant sample of the ``wires`` group (seed 20261209, docs/mutation.md), drawn after that
file's tests were committed. What they pin comes from the module docstrings and the Messages
API: a refused image source or a missing ``max_tokens`` names its field, a message remembers the
wire it was parsed from, tools reach pricing in the chat shape, a client's breakpoint is never
rewritten, and a block the fit did not touch goes out as the client's own. Each test was seen
failing with the mutant it was written for; the two on ``thinking`` blocks and images pin
mutants of the same sample that only the properties' generated sessions caught.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from anthropic_bodies import messages_body, refusal_of, tool_round

from pricing.messages import ImagePart, TextPart
from proxy.wires.anthropic_parse import REST, TOOL, WHOLE, parse_anthropic
from proxy.wires.anthropic_render import breakpoints, mark_head, render_messages

EPHEMERAL = {"type": "ephemeral"}


def _image(source: Any) -> dict[str, Any]:
    return {"type": "image", "source": source}


# --- parsing: refusals name their field -----------------------------------------------------


def test_an_image_of_an_unknown_media_type_is_refused_at_its_source() -> None:
    # Anthropic takes JPEG, PNG, GIF and WebP; the refusal points at the image's source.
    body = messages_body(
        [
            {"role": "user", "content": "Task"},
            {"role": "assistant", "content": "ok"},
            {
                "role": "user",
                "content": [_image({"type": "base64", "media_type": "image/bmp", "data": "Qk0="})],
            },
        ]
    )
    refusal = refusal_of(body)
    assert "media_type must be one of" in refusal.message
    assert refusal.param == "messages[2].content[0].source"


def test_an_image_source_of_an_unknown_type_is_refused_at_its_source() -> None:
    body = messages_body([{"role": "user", "content": [_image({"type": "ftp", "path": "/a.png"})]}])
    refusal = refusal_of(body)
    assert "source.type must be 'base64' or 'url'" in refusal.message
    assert "'ftp'" in refusal.message  # what the client sent, quoted
    assert refusal.param == "messages[0].content[0].source"


def test_a_missing_max_tokens_is_refused_but_not_for_count_tokens() -> None:
    # max_tokens is required by the Messages API; a count_tokens body has none.
    body = {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    refusal = refusal_of(body)
    assert refusal.message == "max_tokens is required"
    assert refusal.param == "max_tokens"
    assert parse_anthropic(body, count_only=True).max_output_tokens is None


# --- parsing: what blocks are priced as -----------------------------------------------------


def test_thinking_blocks_are_priced_as_their_text() -> None:
    # Module docstring: an assistant message's text and thinking / redacted_thinking blocks are
    # priced as text (the thinking's words, the redacted block's opaque data); a thinking block
    # with no words (empty, or only a signature, as when thinking is omitted from the display)
    # costs no text (third sample: x__part__mutmut_34).
    body = messages_body(
        [
            {"role": "user", "content": "Task"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Let me see. ", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque. "},
                    {"type": "thinking", "thinking": "", "signature": "sig1"},
                    {"type": "thinking", "signature": "sig2"},
                    {"type": "text", "text": "Done."},
                ],
            },
            {"role": "user", "content": "next"},
        ]
    )
    said = parse_anthropic(body).messages[1]
    assert said.role == "assistant"
    assert said.parts == (
        TextPart("Let me see. "),
        TextPart("opaque. "),
        TextPart(""),
        TextPart(""),
        TextPart("Done."),
    )


def test_image_blocks_become_image_parts_priced_from_their_source() -> None:
    # A url image is priced from its URL, a base64 one through a data URL of its media type.
    png = "iVBORw0KGgo="
    body = messages_body(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare:"},
                    _image({"type": "url", "url": "https://example.com/a.png"}),
                    _image({"type": "base64", "media_type": "image/png", "data": png}),
                ],
            }
        ]
    )
    asked = parse_anthropic(body).messages[0]
    assert asked.parts[0] == TextPart("Compare:")
    assert asked.images == (
        ImagePart("https://example.com/a.png"),
        ImagePart(f"data:image/png;base64,{png}"),
    )
    assert asked.text == "Compare:"  # an image is not priced as text


def test_each_internal_message_remembers_the_wire_it_was_parsed_from() -> None:
    # Message.wire is the wire dict a message was parsed from (pricing reads a string content
    # there as one text to cut, and keeps the client's other keys): a whole user or assistant
    # message is the client's own object, a fragment of a user message its own blocks.
    messages: list[Any] = [
        {"role": "user", "content": "Task: look."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "exit 0"},
                {"type": "text", "text": "go on"},
            ],
        },
    ]
    request = parse_anthropic(messages_body(messages))
    task, call, result, rest = request.messages
    assert task.wire is messages[0]
    assert call.wire is messages[1]
    assert result.wire == {"role": "user", "content": [messages[2]["content"][0]]}
    assert rest.wire == {"role": "user", "content": [messages[2]["content"][1]]}
    assert [f.kind for f in request.fragments] == [WHOLE, WHOLE, TOOL, REST]


# --- parsing: tool definitions as pricing reads them ----------------------------------------


def test_tools_reach_pricing_in_the_chat_shape_and_server_tools_as_they_are() -> None:
    # _tools' docstring: custom tools as {name, description, parameters} (input_schema is the
    # parameters), server tools as they are.
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    body = messages_body(
        [{"role": "user", "content": "hi"}],
        tools=[
            {"name": "read", "description": "Read a file.", "input_schema": schema},
            {"type": "custom", "name": "noop", "input_schema": {"type": "object"}},
            search,
        ],
    )
    tools = parse_anthropic(body).tools
    assert tools[0] == {"name": "read", "description": "Read a file.", "parameters": schema}
    assert tools[1] == {"name": "noop", "parameters": {"type": "object"}}
    assert tools[2] == search


def test_a_tool_that_is_not_an_object_is_refused_at_its_place() -> None:
    refusal = refusal_of(
        messages_body([{"role": "user", "content": "hi"}], tools=[{"name": "a"}, "b"])
    )
    assert refusal.message == "tools[1] must be an object"
    assert refusal.param == "tools[1]"


# --- writing: what the client sent stays the client's ---------------------------------------


def _cut_second_block(inner: list[dict[str, Any]]) -> list[Any]:
    """The rendered content of a tool result whose second text block the fit cut."""
    request = parse_anthropic(messages_body(tool_round(inner)))
    fitted = list(request.messages)
    result = fitted[2]
    assert result.role == "tool"
    fitted[2] = replace(result, parts=(result.parts[0], TextPart("log [cut]")), wire=None)
    out, _ = render_messages(request, fitted)
    return out[2]["content"][0]["content"]


def test_a_text_block_the_fit_did_not_touch_goes_out_as_the_clients_own() -> None:
    # Only what the fit changed is rendered from its parts: an untouched text block keeps every
    # field the client gave it (here a citation), as the very object it sent.
    kept = {
        "type": "text",
        "text": "exit 0",
        "citations": [{"type": "char_location", "cited_text": "exit", "document_index": 0}],
    }
    content = _cut_second_block([kept, {"type": "text", "text": "log " * 200}])
    assert content[0] is kept
    assert content[1] == {"type": "text", "text": "log [cut]"}


def test_a_cut_text_block_keeps_the_clients_breakpoint() -> None:
    # Client breakpoints in what is kept stay where they are: a cut block keeps its
    # cache_control (the client's own, a one-hour TTL included).
    hour = {"type": "ephemeral", "ttl": "1h"}
    content = _cut_second_block(
        [
            {"type": "text", "text": "exit 0"},
            {"type": "text", "text": "log " * 200, "cache_control": hour},
        ]
    )
    assert content[1] == {"type": "text", "text": "log [cut]", "cache_control": hour}


def test_a_block_the_client_already_marked_is_not_marked_again() -> None:
    # The client's breakpoint (with its own TTL) stays as it is: routefit places none there
    # and does not rewrite it into its own.
    hour = {"type": "ephemeral", "ttl": "1h"}
    marked = {"type": "text", "text": "Task", "cache_control": hour}
    messages: list[Any] = [
        {"role": "user", "content": [marked]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "next"},
    ]
    before = breakpoints({}, messages)
    assert mark_head({}, messages, (0, 0)) is False
    assert messages[0]["content"] == [marked]
    assert messages[0]["content"][0]["cache_control"] == hour
    assert breakpoints({}, messages) == before
