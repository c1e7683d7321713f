"""Invariants of parse → fit → chat on the Gemini form, for generated sessions: every
``functionCall`` and ``functionResponse`` stays paired, whether the client gave ids or Gemini's
pairing by name and order had to be turned into ids, and whatever the fit removed. And of
parse → fit → Gemini (a native route, ``gemini_render``): an unchanged conversation rebuilt is
the client's contents object for object; a fitted one sends model turns as they came and every
function response after the model turn that called it, in the order Google takes (the
simulator's ``check_turns``, an independent reading of Google's rules)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from depth import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pricing.framing import Framing
from pricing.images import default_image_rule
from pricing.route import Route
from proxy.sim.wire_gemini import check_turns
from proxy.wires.gemini_chat import chat_messages
from proxy.wires.gemini_parse import GeminiRequest, parse_gemini
from proxy.wires.gemini_render import native_body
from strategies.fit import FitError, fit
from strategies.policy import FitPolicy

ROUTE = Route(
    alias="small",
    model="openai/gpt-4o",
    provider="openai",
    context_window=5000,
    max_output_tokens=1024,
    tokenizer="o200k_base",
    framing=Framing(family="openai"),
    image_rule=default_image_rule("gpt-4o", True),
    supports_vision=True,
)
POLICY = FitPolicy()
NAMES = ("read_file", "ls", "grep")


@st.composite
def sessions(draw: st.DrawFn) -> list[dict[str, Any]]:
    """User turn, then rounds of a model turn (text, a thought, 0-3 calls, ids or not) and the
    user turn answering every call (in any order: Gemini pairs by name, then order)."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "start " * 5}]}]
    for r in range(draw(st.integers(1, 6))):
        names = draw(st.lists(st.sampled_from(NAMES), max_size=3))
        with_ids = draw(st.booleans())
        parts: list[dict[str, Any]] = []
        if draw(st.booleans()):
            parts.append({"text": f"thinking {r}", "thought": True, "thoughtSignature": "c2ln"})
        parts.append({"text": f"round {r} " * draw(st.integers(1, 20))})
        calls = []
        for c, name in enumerate(names):
            call: dict[str, Any] = {"name": name, "args": {"n": c}}
            if with_ids:
                call["id"] = f"id-{r}-{c}"
            calls.append(call)
            parts.append({"functionCall": call})
        contents.append({"role": "model", "parts": parts})
        order = draw(st.permutations(range(len(calls))))
        answers: list[dict[str, Any]] = []
        for c in order:
            response = {
                "name": calls[c]["name"],
                "response": {"output": "x " * draw(st.integers(1, 600))},
            }
            if with_ids:
                response["id"] = calls[c]["id"]
            answers.append({"functionResponse": response})
        user_parts = [*answers, {"text": f"next {r}"}] if draw(st.booleans()) else answers
        contents.append({"role": "user", "parts": user_parts or [{"text": f"go on {r}"}]})
    contents.append({"role": "user", "parts": [{"text": "the end"}]})
    return contents


def _parse(contents: list[dict[str, Any]]) -> GeminiRequest:
    body = {"contents": contents}
    return parse_gemini(body, "small", sse=False, array=False, counting=False)


def _paired(chat: list[dict[str, Any]]) -> None:
    """Every tool message answers a call of the assistant message just before its run of tool
    messages, and every call is answered exactly once there."""
    pending: Counter[str] = Counter()
    for message in chat:
        if message["role"] == "tool":
            assert pending[message["tool_call_id"]] == 1, message
            pending[message["tool_call_id"]] -= 1
            continue
        assert not +pending, f"unanswered calls {+pending} before {message['role']}"
        for call in message.get("tool_calls") or []:
            pending[call["id"]] += 1
        assert not content_is_response_note(message), message
    assert not +pending


def content_is_response_note(message: dict[str, Any]) -> bool:
    """A tool result sent as user text: the translation's way out for a response that answers
    no call (never needed by a well-paired session)."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith("[function response]")


COMMON = settings(
    max_examples=examples(60, 500), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@COMMON
@given(sessions())
def test_every_call_and_response_is_one_pair_once_parsed(contents):
    request = _parse(contents)
    calls = [p for c in contents for p in c["parts"] if "functionCall" in p]
    responses = [p for c in contents for p in c["parts"] if "functionResponse" in p]
    assert sum(len(m.tool_calls) for m in request.messages) == len(calls)
    assert sum(m.role == "tool" for m in request.messages) == len(responses)
    chat = chat_messages(request.messages)
    _paired(chat)
    # a response goes to a call of its own name
    names = {c["id"]: c["function"]["name"] for m in chat for c in m.get("tool_calls") or []}
    for m in request.messages:
        if m.role == "tool":
            assert m.wire is not None
            assert names[str(m.tool_call_id)] == m.wire["functionResponse"]["name"]


@COMMON
@given(sessions())
def test_what_the_fit_keeps_stays_paired(contents):
    request = _parse(contents)
    try:
        fitted = fit(request, ROUTE, POLICY)
    except FitError:
        return
    _paired(chat_messages(fitted.messages))


@COMMON
@given(sessions())
def test_derived_ids_are_stable_as_the_conversation_grows(contents):
    """A session's next request repeats it and adds turns at its end: the calls already there
    keep their ids (a cache-stable fit plan keys on them)."""
    before = _parse(contents[:-1]).messages
    after = _parse([*contents, {"role": "user", "parts": [{"text": "more"}]}]).messages
    ids = [c.id for m in before for c in m.tool_calls]
    assert ids == [c.id for m in after[: len(before)] for c in m.tool_calls]


@COMMON
@given(sessions())
def test_a_conversation_rebuilt_unchanged_is_the_clients_contents(contents):
    """Even when the body must be rebuilt (another field changed), every content the fit left
    whole goes out as the very object the client sent: a provider's cached prefix is intact."""
    request = _parse(contents)
    assert native_body(request, request.body, request.messages) is request.body
    rebuilt = native_body(request, {}, request.messages)["contents"]
    assert len(rebuilt) == len(contents)
    assert all(a is b for a, b in zip(rebuilt, contents, strict=True))


@COMMON
@given(sessions())
def test_fitted_native_contents_keep_model_turns_and_pairs(contents):
    request = _parse(contents)
    try:
        fitted = fit(request, ROUTE, POLICY)
    except FitError:
        return
    sent = native_body(request, fitted.body, fitted.messages)["contents"]
    originals = {id(c) for c in contents}
    called: Counter[str] = Counter()
    for content in sent:
        parts = content["parts"]
        assert parts, content
        if content.get("role") == "model":
            calls = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
            assert id(content) in originals or not calls  # a marker has no calls
            called = Counter(calls)
            continue
        answered = Counter(p["functionResponse"]["name"] for p in parts if "functionResponse" in p)
        assert not answered - called, (answered, called)  # each answers the turn before it
        called -= answered
    assert sent[-1] is contents[-1]
    check_turns(contents)  # the simulator's reading of Google's rules: the client's is valid,
    check_turns(sent)  # and so is what the fit sends
