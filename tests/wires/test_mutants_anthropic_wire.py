"""The Anthropic wire's parser and writer at the points its properties do not read.

``test_anthropic_properties.py`` drives valid generated sessions through parse → fit → write
and checks invariants of what goes out; it never sends a malformed body (so it cannot see an
error that names the wrong field), never reads the internal messages a body parses into, and
never asks where routefit's breakpoints land. These tests pin those promises of the module
docstrings and the Messages API (issue 35, the mutation sample of the ``wires`` group in
docs/mutation.md): each one was seen failing with the mutant it was written for.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from anthropic_bodies import messages_body, refusal_of, tool_round

from pricing.messages import ImagePart, TextPart
from proxy.wires.anthropic_parse import SYSTEM, parse_anthropic
from proxy.wires.anthropic_render import mark_head, render_messages
from strategies.mask import MASK_PREFIX, mask_output

EPHEMERAL = {"type": "ephemeral"}


# --- parsing: what a body becomes -----------------------------------------------------------


def test_each_anthropic_message_becomes_its_internal_messages_in_their_roles() -> None:
    # The module docstring's mapping: an assistant message is one ``assistant`` message, a user
    # message one ``tool`` message per tool_result (answering its call) and then one ``user``
    # message with the other blocks; the roles are what pricing frames and the fit pairs.
    request = parse_anthropic(
        messages_body(
            [
                {"role": "user", "content": "Task: look."},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Reading."},
                        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "exit 0"},
                        {"type": "text", "text": "go on"},
                    ],
                },
            ]
        )
    )
    assert [m.role for m in request.messages] == ["user", "assistant", "tool", "user"]
    assert [m.text for m in request.messages] == ["Task: look.", "Reading.", "exit 0", "go on"]
    assert request.messages[1].tool_calls[0].id == "toolu_1"
    assert request.messages[2].tool_call_id == "toolu_1"
    assert [(f.index, f.role) for f in request.fragments] == [
        (0, "user"),
        (1, "assistant"),
        (2, "user"),
        (2, "user"),
    ]


def test_a_tool_result_is_priced_by_its_content_and_an_empty_one_by_nothing() -> None:
    # A string content is the tool's output (one text part); absent or "" content is no output.
    said = parse_anthropic(messages_body(tool_round("exit 0"))).messages[2]
    assert said.role == "tool"
    assert said.text == "exit 0"
    assert len(said.parts) == 1
    for empty in ("", None):
        silent = parse_anthropic(messages_body(tool_round(empty))).messages[2]
        assert silent.role == "tool"
        assert silent.parts == ()


@pytest.mark.parametrize(
    "system", ["You are an agent.", [{"type": "text", "text": "You are an agent."}]]
)
def test_the_system_field_is_the_first_message_and_remembers_its_blocks(system: Any) -> None:
    # ``system`` (a string or text blocks) → one internal ``system`` message, always kept, whose
    # fragment (index -1) carries the system blocks the writer leaves in the ``system`` field.
    request = parse_anthropic(messages_body([{"role": "user", "content": "hi"}], system=system))
    first = request.messages[0]
    assert (first.role, first.text) == ("system", "You are an agent.")
    frag = request.fragments[0]
    assert (frag.index, frag.kind) == (-1, SYSTEM)
    assert frag.blocks == ({"type": "text", "text": "You are an agent."},)
    nothing: tuple[Any, ...] = ("", [], None)
    for none in nothing:
        bare = parse_anthropic(messages_body([{"role": "user", "content": "hi"}], system=none))
        assert [m.role for m in bare.messages] == ["user"]


# --- parsing: what a body is refused for, and where -----------------------------------------


def test_a_tool_use_without_an_id_is_refused_at_its_block() -> None:
    body = messages_body(
        [
            {"role": "user", "content": "Task"},
            {"role": "assistant", "content": [{"type": "tool_use", "name": "read", "input": {}}]},
        ]
    )
    refusal = refusal_of(body)
    assert "tool_use needs a string id and name" in refusal.message
    assert refusal.param == "messages[1].content[0]"


def test_a_system_entry_in_messages_cannot_carry_a_tool_result() -> None:
    # Claude Code's ``role: "system"`` entries are text: a tool block there answers no call.
    body = messages_body(
        [
            {"role": "user", "content": "Task"},
            {
                "role": "system",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}],
            },
        ]
    )
    refusal = refusal_of(body)
    assert "system messages cannot carry tool blocks" in refusal.message
    assert refusal.param == "messages[1].content[0]"


def test_a_bad_block_in_a_system_entry_is_named_by_its_place() -> None:
    body = messages_body(
        [{"role": "user", "content": "Task"}, {"role": "system", "content": [{"type": "text"}]}]
    )
    assert refusal_of(body).param == "messages[1].content[0].text"


def test_a_bad_block_inside_a_tool_result_is_named_by_its_place() -> None:
    body = messages_body(tool_round([{"text": "no type"}]))
    refusal = refusal_of(body)
    assert refusal.param == "messages[2].content[0].content[0]"


def test_a_system_field_of_the_wrong_shape_is_named() -> None:
    refusal = refusal_of(messages_body([{"role": "user", "content": "hi"}], system=5))
    assert refusal.param == "system"


def test_request_level_refusals_name_their_field() -> None:
    empty = refusal_of(messages_body([]))
    assert "non-empty list" in empty.message
    assert empty.param == "messages"
    stream = refusal_of(messages_body([{"role": "user", "content": "hi"}], stream="yes"))
    assert stream.message == "stream must be a boolean"
    assert stream.param == "stream"


# --- writing: the fitted conversation and its breakpoints -----------------------------------


def _masked_session() -> tuple[Any, list[Any]]:
    """Two tool rounds whose first output the fit masked (the real placeholder)."""
    messages = [
        *tool_round("line\n" * 50),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_2", "name": "read", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"}],
        },
    ]
    request = parse_anthropic(messages_body(messages))
    fitted = list(request.messages)
    assert fitted[2].tool_call_id == "toolu_1"
    fitted[2] = mask_output(fitted[2], "read", 100)
    return request, fitted


def test_a_masked_string_output_goes_out_as_its_placeholder_text_block() -> None:
    # The tool_result keeps its other fields with new content: a text block holding the
    # placeholder, not the client's output (nor any block type Anthropic does not know).
    request, fitted = _masked_session()
    out, _ = render_messages(request, fitted)
    result = out[2]["content"][0]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "toolu_1"
    assert result["content"] == [{"type": "text", "text": fitted[2].text}]
    assert fitted[2].text.startswith(MASK_PREFIX)
    assert out[4] is request.body["messages"][4]  # the unchanged message is the client's object


def test_without_an_elision_the_head_is_the_last_masked_output() -> None:
    # Masking without eliding: routefit's first breakpoint goes on the last masked output.
    request, fitted = _masked_session()
    _, head = render_messages(request, fitted)
    assert head == (2, 0)


def test_the_second_mark_goes_where_the_previous_request_ended() -> None:
    # mark_head's docstring: after ``at``, a breakpoint on the block before the newest
    # assistant message (the client's last-block breakpoint of the previous request).
    messages: list[Any] = [
        {"role": "user", "content": "Task"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    assert mark_head({}, messages, (0, 0))
    assert messages[0]["content"] == [{"type": "text", "text": "Task", "cache_control": EPHEMERAL}]
    assert messages[2]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b", "cache_control": EPHEMERAL},
    ]
    assert "cache_control" not in str(messages[4])


def test_a_cut_tool_result_keeps_the_clients_image_block() -> None:
    # A capped tool_result is rendered from its parts, and a part that still is what it was
    # goes out as the client's own block: the fit never creates or rewrites an image.
    shot = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    request = parse_anthropic(
        messages_body(tool_round([{"type": "text", "text": "log " * 200}, shot]))
    )
    fitted = list(request.messages)
    cut = fitted[2]
    assert isinstance(cut.parts[1], ImagePart)
    fitted[2] = replace(cut, parts=(TextPart("log [cut]"), cut.parts[1]), wire=None)
    out, _ = render_messages(request, fitted)
    content = out[2]["content"][0]["content"]
    assert content[0] == {"type": "text", "text": "log [cut]"}
    assert content[1] is shot
