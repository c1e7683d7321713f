"""The Anthropic wire's parser and writer at the points a third sample found unread.

The third round of ``test_mutants_anthropic_wire.py``: the survivors of a fresh 40-mutant
sample of the ``wires`` group (docs/mutation.md), drawn after ``_2``'s tests were committed.
What they pin comes from the module docstrings and the Messages API: a refusal names the field
at fault and says what is wrong with it, a tool result holds no tool blocks, an assistant turn
is never rewritten even when a policy changed it, an elision marker never joins an assistant
turn, and a changed message is matched to the original it stands for (an empty thinking block
costing nothing is in ``_2``'s thinking test). Each test was seen failing with the mutant it
was written for. The ninth survivor, ``x__system__mutmut_39`` (the role in the ``system``
field's internal wire dict), is equivalent: the writer skips that message (the body's own
``system`` goes out), pricing reads ``Message.role``, and the calibrator's prefix digests
change alike for every request.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from anthropic_bodies import messages_body, refusal_of

from pricing.messages import Message, TextPart
from proxy.wires.anthropic_parse import parse_anthropic
from proxy.wires.anthropic_render import render_messages
from strategies.elide import elision_marker

# --- parsing: refusals name their field (x__message__mutmut_5, x__system__mutmut_26,
# --- x_parse_anthropic__mutmut_19, x__result_parts__mutmut_22) ----------------------------


def test_a_message_that_is_not_an_object_is_refused_at_its_place() -> None:
    """A messages entry that is not an object is refused with a message saying so, at it."""
    refusal = refusal_of(messages_body([{"role": "user", "content": "hi"}, "hello"]))
    assert refusal.message == "messages[1] must be an object"
    assert refusal.param == "messages[1]"


def test_a_system_block_that_is_not_text_is_refused_at_its_place() -> None:
    """The ``system`` field takes text blocks only; the refusal points at the offending one."""
    body = messages_body(
        [{"role": "user", "content": "hi"}],
        system=[
            {"type": "text", "text": "You are terse."},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        ],
    )
    refusal = refusal_of(body)
    assert refusal.message == "system[1] must be a text block"
    assert refusal.param == "system[1]"


def test_a_model_that_is_not_a_string_is_refused_at_the_model_field() -> None:
    """``model`` must be a string; the refusal names the field."""
    body = messages_body([{"role": "user", "content": "hi"}])
    body["model"] = 4
    refusal = refusal_of(body)
    assert refusal.message == "model must be a string"
    assert refusal.param == "model"


def test_a_tool_result_inside_a_tool_result_is_a_client_mistake() -> None:
    """A tool_result's content holds text and images, never tool blocks: a nested tool_result
    is refused as the client's mistake, at its place (not an internal error)."""
    nested = {"type": "tool_result", "tool_use_id": "toolu_0", "content": "x"}
    body = messages_body(
        [
            {"role": "user", "content": "Task"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "ok"}, nested],
                    }
                ],
            },
        ]
    )
    refusal = refusal_of(body)
    assert refusal.message == (
        "messages[2].content[0].content[1]: a tool_result cannot contain tool_result blocks"
    )
    assert refusal.param == "messages[2].content[0].content[1]"


# --- writing: assistant turns are never rewritten (x__message__mutmut_48) -------------------


def test_an_assistant_turn_a_policy_changed_goes_out_as_the_client_sent_it() -> None:
    """Module docstring of the writer: an assistant fragment is always sent as it came (a
    policy that caps assistant messages does not reach them): its thinking signature and its
    blocks stay the client's own."""
    thinking = {"type": "thinking", "thinking": "Let me see. " * 50, "signature": "sig"}
    said = {"type": "text", "text": "Long answer. " * 50}
    messages: list[Any] = [
        {"role": "user", "content": "Task"},
        {"role": "assistant", "content": [thinking, said]},
        {"role": "user", "content": "next"},
    ]
    request = parse_anthropic(messages_body(messages))
    fitted = list(request.messages)
    assistant = fitted[1]
    assert assistant.role == "assistant"
    fitted[1] = replace(
        assistant, parts=(TextPart("Let me [cut]"), TextPart("Long [cut]")), wire=None
    )
    out, _ = render_messages(request, fitted)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[1]["content"] == [thinking, said]
    assert out[1]["content"][0] is thinking
    assert out[1]["content"][1] is said


# --- writing: markers never join an assistant turn (x_render_messages__mutmut_22) -----------


def test_an_assistant_marker_after_an_assistant_turn_opens_the_next_user_message() -> None:
    """A marker the fit gave the assistant's role that follows an assistant turn is the
    user's instead, merged at the head of the user message after it: roles still alternate
    and every message has a role Anthropic knows."""
    messages: list[Any] = [
        {"role": "user", "content": "Task"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "new question"},
    ]
    request = parse_anthropic(messages_body(messages))
    text = elision_marker(2, 1234)
    marker = Message("assistant", (TextPart(text),), wire={"role": "assistant", "content": text})
    kept = request.messages
    out, head = render_messages(request, [kept[0], kept[1], marker, kept[4]])
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[1] is messages[1]  # the assistant turn is not rewritten
    assert out[2]["content"] == [
        {"type": "text", "text": text},
        {"type": "text", "text": "new question"},
    ]
    assert head == (1, 0)  # the last block before the marker


# --- writing: a changed message stands for its own original (x__original_of__mutmut_13) -----


def test_an_offloaded_message_keeps_its_other_blocks_as_the_clients_own() -> None:
    """A changed message (here its image offloaded to text) stands for the first later message
    of its role whose parts line up: its untouched text block goes out as the client's own
    object, breakpoint included, even when an earlier message of its role was elided."""
    marked = {"type": "text", "text": "Compare this:", "cache_control": {"type": "ephemeral"}}
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    messages: list[Any] = [
        {"role": "user", "content": "Task"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [marked, image]},
    ]
    request = parse_anthropic(messages_body(messages))
    asked = request.messages[2]
    offloaded = replace(
        asked, parts=(asked.parts[0], TextPart("[image: a.png, offloaded]")), wire=None
    )
    out, _ = render_messages(request, [offloaded])
    assert out == [
        {
            "role": "user",
            "content": [marked, {"type": "text", "text": "[image: a.png, offloaded]"}],
        }
    ]
    assert out[0]["content"][0] is marked
