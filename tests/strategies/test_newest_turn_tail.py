"""The tool round a conversation's tail answers is kept as the newest turn is, whatever the tail.

``strategies.units`` protects the newest unit and, when the conversation's tail answers a tool
round, that round. The tail was the latest user message alone: a ``system`` / ``developer`` note
after it (OpenAI chat and the Responses wire take them anywhere; Claude Code sends ``role:
system`` entries inside Messages' ``messages``), a note or an earlier user message between the
round and it, or a prefill after a note made something else the newest unit, and the round the
user reacts to was masked like any old round, while the same conversation ending with the user
message kept it. Now the round before any tail of user, system and developer messages (with a
final prefill) is preferred as the newest turn is (``strategies.units.answered_rounds``).

A preference, not the core: a first attempt made the tail and the round one unit with the
latest user message, which put the round in what no cut may touch, and the fit refused requests
whose system prompt and latest user message fit (commit 90ed75f, reverted). Here a round that
does not fit yields — its outputs masked, the newest capped, then its calls elided — before
anything is refused; property-tested over the hunt's conversations with every tail appended.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fit import route
from test_fit_invariants_hunt import (
    MARKER_ROOM,
    POLICIES,
    check_adjacent,
    check_messages_api,
    hunts,
)

from pricing.messages import parse_request
from pricing.meter import measure
from strategies.fit import FitError, fit
from strategies.mask import MASK_PREFIX, mask_placeholder
from strategies.policy import FitPolicy, prompt_budget
from strategies.units import answered_round, group_units, protected_units

WORDS = "alpha beta gamma delta token window budget request provider route cache page".split()
ROUNDS = 30
QUESTION = {"role": "user", "content": "Now summarise the last file. " + "please " * 1500}
SYSTEM_NOTE = {"role": "system", "content": "Answer in one paragraph."}
DEVELOPER_NOTE = {"role": "developer", "content": "Answer in one paragraph."}
PREFILL = {"role": "assistant", "content": "The"}


def text(rnd: random.Random, n: int) -> str:
    return " ".join(f"{rnd.choice(WORDS)}{rnd.randint(0, 99)}" for _ in range(n))


def session(newest: int = 350, calls: int = 1) -> list[dict[str, Any]]:
    """A task and tool rounds; the newest round has ``calls`` parallel calls of ``newest``
    words each. With the latest question (long) the prompt overflows an 8k route, so older
    outputs are masked."""
    rnd = random.Random(3)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Task: " + text(rnd, 20)},
    ]
    for k in range(ROUNDS):
        n = calls if k == ROUNDS - 1 else 1
        ids = [f"c{k}_{j}" for j in range(n)]
        fn = {"name": "read", "arguments": "{}"}
        tool_calls = [{"id": i, "type": "function", "function": fn} for i in ids]
        messages.append({"role": "assistant", "content": "Reading.", "tool_calls": tool_calls})
        size = newest if k == ROUNDS - 1 else 100
        messages += [{"role": "tool", "tool_call_id": i, "content": text(rnd, size)} for i in ids]
    return messages


#: What ends the conversation after the newest round; "question" is the plain case.
TAILS: dict[str, list[dict[str, Any]]] = {
    "question": [QUESTION],
    "system note after": [QUESTION, SYSTEM_NOTE],
    "developer note after": [QUESTION, DEVELOPER_NOTE],
    "developer note before": [DEVELOPER_NOTE, QUESTION],
    "two user messages": [{"role": "user", "content": "I read it too."}, QUESTION],
    "prefill after a note": [QUESTION, DEVELOPER_NOTE, PREFILL],
    "prefill after a system note": [QUESTION, SYSTEM_NOTE, PREFILL],
}


def fitted(
    messages: list[dict[str, Any]], window: int = 8192, masked: bool = True
) -> tuple[list[dict], int]:
    """What goes out, within the budget and valid, and the budget; ``masked``: older outputs
    were masked (the prompt overflowed)."""
    body = {"model": "t", "messages": copy.deepcopy(messages), "max_tokens": 256}
    result = fit(parse_request(body), route(window), FitPolicy())
    sent = measure(parse_request(result.body), route(window)).total
    assert sent <= result.report.budget
    check_adjacent(result.body["messages"])
    assert ("masked=" in result.report.actions.header()) == masked
    return result.body["messages"], result.report.budget


def round_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if str(m.get("tool_call_id", "")).startswith(f"c{ROUNDS - 1}_")]


@pytest.mark.parametrize("tail", TAILS, ids=list(TAILS))
def test_the_round_a_tail_answers_is_kept_verbatim_as_the_plain_question_keeps_it(
    tail: str,
) -> None:
    plain, _ = fitted(session() + TAILS["question"])
    assert round_results(plain) == round_results(session())  # the plain case keeps it
    sent, _ = fitted(session() + TAILS[tail])
    assert sent[-len(TAILS[tail]) :] == TAILS[tail]
    assert round_results(sent) == round_results(session()), f"{tail}: the round went masked"


def test_a_note_alone_after_the_round_keeps_it_as_the_round_alone_does() -> None:
    """No user message after the round (the latest one is the task): the round is the newest
    unit without the note, and stays as preferred with it."""
    base = session()
    base[1] = {"role": "user", "content": "Task: " + "please " * 1500}
    plain, _ = fitted(base)
    assert round_results(plain) == round_results(base)
    for note in (SYSTEM_NOTE, DEVELOPER_NOTE):
        sent, _ = fitted([*base, note])
        assert sent[-1] == note
        assert round_results(sent) == round_results(base)


@pytest.mark.parametrize("tail", TAILS, ids=list(TAILS))
def test_a_round_that_cannot_fit_yields_and_the_request_is_not_refused(tail: str) -> None:
    """Eight parallel outputs of ~1,800 tokens each on an 8k route: the round cannot go whole
    beside the question, so its outputs are masked (the newest one capped to the room left);
    the core and the tail go as they are."""
    messages = session(newest=700, calls=8) + TAILS[tail]
    sent, _ = fitted(messages)
    assert sent[0] == messages[0]
    assert sent[-len(TAILS[tail]) :] == TAILS[tail]
    results = round_results(sent)
    assert [m["tool_call_id"] for m in results] == [f"c{ROUNDS - 1}_{j}" for j in range(8)]
    assert any(m["content"].startswith(MASK_PREFIX) for m in results)
    assert results != round_results(session(newest=700, calls=8))


@pytest.mark.parametrize("tail", TAILS, ids=list(TAILS))
def test_a_round_that_cannot_fit_even_masked_loses_its_calls_not_the_request(tail: str) -> None:
    """Six hundred parallel calls: their placeholders alone outgrow a 3k route, so the round is
    elided with its calls; the system prompt, the question and the rest of the tail fit and go."""
    messages = session(newest=20, calls=600) + TAILS[tail]
    sent, budget = fitted(messages, window=3000, masked=False)
    masked = [{**m, "content": mask_placeholder("read", 999)} for m in round_results(messages)]
    assert measure(parse_request({"model": "t", "messages": masked}), route(3000)).total > budget
    assert sent[0] == messages[0]
    assert sent[-len(TAILS[tail]) :] == TAILS[tail]
    assert not round_results(sent)


@pytest.mark.parametrize("tail", TAILS, ids=list(TAILS))
def test_the_round_and_the_tail_are_protected_but_the_units_stay_apart(tail: str) -> None:
    """The round, the notes and the latest user message are protected from the plans' elision,
    each its own unit (the tail's other user messages are not): the latest user message's unit
    is that message alone (with a final prefill), so the core the last resort keeps is what it
    was."""
    messages = parse_request({"model": "t", "messages": session() + TAILS[tail]}).messages
    units = group_units(messages)
    keep = protected_units(messages, units)
    kept = {i for u in keep for i in range(units[u].start, units[u].end)}
    latest = max(i for i, m in enumerate(messages) if m.role == "user")
    tail_users = {i for i in range(2 * ROUNDS + 2, len(messages)) if messages[i].role == "user"}
    assert set(range(2 * ROUNDS, len(messages))) - kept == tail_users - {latest}
    round_unit = answered_round(messages, units)
    assert round_unit is not None
    assert (units[round_unit].start, units[round_unit].end) == (2 * ROUNDS, 2 * ROUNDS + 2)
    unit = next(u for u in units if u.start <= latest < u.end)
    assert all(messages[i].role in ("user", "assistant") for i in range(unit.start, unit.end))


def test_a_round_followed_by_an_assistant_reply_is_not_answered_by_a_later_tail() -> None:
    """An assistant reply between the round and the tail ends the tail: the round is old."""
    messages = [*session(), {"role": "assistant", "content": "Done."}, QUESTION, SYSTEM_NOTE]
    parsed = parse_request({"model": "t", "messages": messages}).messages
    assert answered_round(parsed, group_units(parsed)) is None


# -- the property: over the hunt's conversations, with every tail appended --------------------


def _tail(draw: st.DrawFn, budget: int) -> list[dict[str, Any]]:
    """A tail of notes, user messages and a prefill, in an order clients send."""
    size = draw(st.sampled_from([3, 40, max(3, budget // 20)]))

    def note() -> dict[str, Any]:
        role = draw(st.sampled_from(["system", "developer"]))
        return {"role": role, "content": "Note: " + " ".join(["ok"] * size)}

    def user() -> dict[str, Any]:
        return {"role": "user", "content": "Then: " + " ".join(["go"] * size)}

    shape = draw(st.sampled_from(["note", "user note", "note user", "users", "note prefill"]))
    out = {
        "note": lambda: [note()],
        "user note": lambda: [user(), note()],
        "note user": lambda: [note(), user()],
        "users": lambda: [user(), user()],
        "note prefill": lambda: [note(), dict(PREFILL)],
    }[shape]()
    if shape != "note prefill" and draw(st.booleans()):
        out.append(dict(PREFILL))
    return out


@st.composite
def tailed(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int]:
    messages, window = draw(hunts())
    budget = prompt_budget(window, 1024, FitPolicy(), 256)
    return [*messages, *_tail(draw, budget)], window


def _price(messages: list[dict[str, Any]], window: int) -> int:
    return measure(parse_request({"model": "t", "messages": messages}), route(window)).total


def _core(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What no cut may touch: system and developer messages, the latest user message, and a
    final prefill (one unit with what it follows)."""
    latest = max(i for i, m in enumerate(messages) if m["role"] == "user")
    prefill = messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls")
    return [
        m
        for i, m in enumerate(messages)
        if m["role"] in ("system", "developer")
        or i == latest
        or (prefill and i == len(messages) - 1)
    ]


def _round_and_tail(messages: list[dict[str, Any]]) -> tuple[list[dict], set[str]]:
    """The core, the round before the conversation's last run of user, system and developer
    messages (with a final prefill) with its outputs masked at their widest, and that run; and
    the round's call ids (none when no round precedes the run)."""
    end = len(messages) - (messages[-1]["role"] == "assistant")
    start = end
    while start > 0 and messages[start - 1]["role"] in ("user", "system", "developer"):
        start -= 1
    call = start
    while call > 0 and messages[call - 1]["role"] == "tool":
        call -= 1
    if call == start or call == 0 or not messages[call - 1].get("tool_calls"):
        return [], set()
    placeholder = mask_placeholder("read_file", 999_999)
    core = {id(m) for m in _core(messages)}
    kept = [
        {**m, "content": placeholder} if call <= i < start else m
        for i, m in enumerate(messages)
        if i >= call - 1 or id(m) in core
    ]
    return kept, {c["id"] for c in messages[call - 1]["tool_calls"]}


# 25 and 15 examples a run in the default suite (~0.25 s and ~0.6 s each): a regression net,
# not the hunt (raise max_examples to hunt; both held on 8 seeds at 40 when they landed)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tailed(), st.sampled_from(POLICIES))
def test_whenever_the_core_fits_a_tailed_conversation_fits_and_keeps_the_round_it_can(
    drawn: tuple[list[dict[str, Any]], int], policy: FitPolicy
) -> None:
    """Refused only when the core cannot fit; otherwise within the budget, valid, the tail's
    notes and prefill as they were, the round the tail answers with every call whenever it fits
    masked beside the tail, and the same bytes again."""
    messages, window = drawn
    r = route(window)
    body = {"model": "t", "messages": messages, "max_tokens": 256}
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, 256)
    try:
        result = fit(parse_request(copy.deepcopy(body)), r, policy)
    except FitError:
        assert _price(_core(messages), window) > budget, "refused, yet the core fits"
        return
    out = result.body["messages"]
    assert measure(parse_request(result.body), r).total <= budget
    check_adjacent(out)
    # the notes and the prefill after the latest user message or tool round go as they were
    last = max(i for i, m in enumerate(messages) if m["role"] in ("user", "tool"))
    after = messages[last + 1 :]
    assert not after or out[-len(after) :] == after
    kept, ids = _round_and_tail(messages)
    if ids and _price(kept, window) + MARKER_ROOM <= budget:
        assert ids <= {c["id"] for m in out for c in m.get("tool_calls") or []}
    again = fit(parse_request(copy.deepcopy(body)), r, policy)
    assert json.dumps(again.body) == json.dumps(result.body)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tailed(), st.sampled_from(POLICIES))
def test_on_the_messages_wire_a_tailed_conversation_fits_and_stays_adjacent(
    drawn: tuple[list[dict[str, Any]], int], policy: FitPolicy
) -> None:
    """The same conversations as an Anthropic Messages body (notes as user text, merged into
    the user turns around them; a prefill as the final assistant turn): within the budget, and
    every tool_use answered in the very next message."""
    messages, window = drawn
    check_messages_api(messages, window, policy)
