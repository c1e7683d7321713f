"""Masking old tool outputs, keeping the newest turn, refusing only what cannot fit (issue 31).

Property-tested over generated agent conversations whose newest turn may carry tool outputs that
together outgrow the budget: whenever the irreducible core (the system prompt and the latest
user message) fits, the result fits, is valid, keeps every call of the newest turn when that
turn fits once masked, and is deterministic."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fit import WORDS, agent_session, check_no_orphans, route

from pricing.messages import parse_request
from pricing.meter import measure
from strategies.fit import FitError, fit
from strategies.mask import MASK_PREFIX, mask_placeholder
from strategies.policy import FitPolicy, prompt_budget

#: Room the tests leave for one elision marker (its price is ~25 tokens).
MARKER_ROOM = 40


def words(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 13) % len(WORDS)] for i in range(n))


@st.composite
def agent_conversations(draw) -> list[dict]:
    """A task, older rounds, the latest user message, then the newest turn: tool rounds whose
    outputs (some parallel, some large) may together exceed a small window."""
    messages: list[dict] = [
        {"role": "system", "content": "You are an agent. " + words(draw(st.integers(0, 60)), 1)},
        {"role": "user", "content": "Task: " + words(draw(st.integers(1, 80)), 2)},
    ]
    call = 0

    def rounds(n: int) -> None:
        nonlocal call
        for _ in range(n):
            ids = []
            for _ in range(draw(st.integers(1, 6))):
                call += 1
                ids.append(f"call_{call}")
            calls = [
                {"id": i, "type": "function", "function": {"name": "run", "arguments": "{}"}}
                for i in ids
            ]
            said = words(draw(st.integers(0, 40)), call)
            messages.append({"role": "assistant", "content": said or None, "tool_calls": calls})
            for i in ids:
                size = draw(st.sampled_from([5, 60, 300, 1200]))
                messages.append({"role": "tool", "tool_call_id": i, "content": words(size, call)})

    rounds(draw(st.integers(0, 6)))
    latest = words(draw(st.integers(1, 400)), 3)
    messages.append({"role": "user", "content": "Now: " + latest})
    rounds(draw(st.integers(0, 6)))
    return messages


def _price(messages: list[dict], r) -> int:
    return measure(parse_request({"model": "t", "messages": messages}), r).total


def core(messages: list[dict]) -> list[dict]:
    """The system prompt and the latest user message: what no cut may touch."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return [m for m in messages if m["role"] == "system"] + [messages[last]]


def newest_turn_masked(messages: list[dict]) -> list[dict]:
    """The task, the latest user message and the newest turn with every output masked."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    turn = [
        {**m, "content": mask_placeholder("run", 999_999)} if m["role"] == "tool" else m
        for m in messages[last:]
    ]
    return messages[:2] + turn


def turn_ids(messages: list[dict]) -> set[str]:
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return {c["id"] for m in messages[last:] for c in m.get("tool_calls") or []}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=agent_conversations(),
    window=st.integers(1200, 12000),
    pin=st.sampled_from([0.0, 0.5, FitPolicy().pin_fraction]),
)
def test_whenever_the_core_fits_the_result_fits_is_valid_and_keeps_the_newest_turn(
    messages, window, pin
):
    r = route(window)
    policy = FitPolicy(pin_fraction=pin)
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, 256)
    body = {"model": "t", "messages": messages, "max_tokens": 256}
    try:
        result = fit(parse_request(copy.deepcopy(body)), r, policy)
    except FitError:
        assert _price(core(messages), r) > budget  # refused only when the core cannot fit
        return
    out = result.body["messages"]
    assert result.report.estimate_after <= budget
    assert _price(out, r) <= budget
    check_no_orphans(out)
    sent = json.dumps(out)
    if _price(newest_turn_masked(messages), r) + MARKER_ROOM <= budget:
        # The newest turn fits once masked: none of its calls is dropped, its words are verbatim.
        assert all(json.dumps(i) in sent for i in turn_ids(messages))
        last = max(i for i, m in enumerate(messages) if m["role"] == "user")
        for m in messages[last:]:
            if m["role"] != "tool" and m.get("content"):
                assert json.dumps(m["content"]) in sent
    # The latest user message is always there, byte for byte.
    assert json.dumps(core(messages)[-1]["content"]) in sent
    again = fit(parse_request(copy.deepcopy(body)), r, policy)
    assert json.dumps(again.body, sort_keys=True) == json.dumps(result.body, sort_keys=True)


def test_outputs_are_masked_before_any_word_is_elided():
    r = route(24000)
    body = agent_session(120)[-1]
    result = fit(parse_request(body), r, FitPolicy())
    assert "masked=" in result.report.actions.header()
    assert "elided" not in result.report.actions.header()
    out = json.dumps(result.body["messages"])
    for m in body["messages"]:
        if m["role"] != "tool":
            assert json.dumps(m["content"]) in out  # every word of the user and the assistant
        else:
            assert json.dumps(m["tool_call_id"]) in out  # every call still answered
    masked = [m for m in result.body["messages"] if str(m["content"]).startswith(MASK_PREFIX)]
    assert len(masked) == result.report.actions["masked"].count > 0
    assert masked[0]["content"].startswith("[routefit: output of sh (")


def test_a_masked_output_stays_masked_identically_on_later_turns():
    # Cache stability: an output once masked is sent as the same bytes on every later request,
    # and consecutive requests share their prefix except at rare jumps.
    r = route(24000)
    policy = FitPolicy()
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, None)
    seen: dict[str, str] = {}
    previous: list[dict] | None = None
    jumps = masked_turns = 0
    for body in agent_session(200):
        out = fit(parse_request(body), r, policy).body["messages"]
        for m in out:
            if m["role"] == "tool" and str(m["content"]).startswith(MASK_PREFIX):
                masked_turns += 1
                assert seen.setdefault(m["tool_call_id"], m["content"]) == m["content"]
            elif m["role"] == "tool":
                assert m["tool_call_id"] not in seen, "an output came back after being masked"
        if previous is not None and out[: len(previous)] != previous:
            jumps += 1
        previous = out
    assert masked_turns > 0
    total = measure(parse_request(agent_session(200)[-1]), r).total
    assert 1 <= jumps <= total / ((1 - policy.low_water) * budget) + 2


def test_a_newest_turn_too_big_for_the_budget_is_masked_not_refused():
    # Parallel outputs, each under the cap, together over the whole budget: the first release
    # refused this ("the protected messages ... do not fit").
    r = route(8192)
    budget = prompt_budget(r.context_window, r.max_output_tokens, FitPolicy(), 256)
    ids = [f"call_{k}" for k in range(8)]
    calls = [
        {"id": i, "type": "function", "function": {"name": "cat", "arguments": "{}"}} for i in ids
    ]
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Read every log."},
        {"role": "assistant", "content": "Reading them all.", "tool_calls": calls},
    ]
    for k, i in enumerate(ids):
        text = words(int(budget * 0.14 / 1.1), k)
        messages.append({"role": "tool", "tool_call_id": i, "content": text})
    assert _price(messages, r) > budget
    result = fit(
        parse_request({"model": "t", "messages": messages, "max_tokens": 256}), r, FitPolicy()
    )
    out = result.body["messages"]
    assert result.report.estimate_after <= budget
    check_no_orphans(out)
    assert [m.get("tool_call_id") for m in out[3:]] == ids  # every call answered
    masked = [str(m["content"]).startswith(MASK_PREFIX) for m in out[3:]]
    assert any(masked) and not all(masked)
    assert masked == sorted(masked, reverse=True)  # the oldest outputs are masked first


def test_refused_only_when_the_system_prompt_and_latest_user_message_cannot_fit():
    r = route(2000)
    huge = words(3000, 1)
    body = {
        "model": "t",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": huge}],
        "max_tokens": 256,
    }
    with pytest.raises(FitError, match="the system prompt and the latest user message"):
        fit(parse_request(body), r, FitPolicy())


def long_turn_session(history: int, turn: int, size: int = 90) -> list[dict]:
    """Requests of a session whose older rounds pin a long head, then one user message and a
    long newest turn of tool rounds: the turn outgrows the room the head leaves it."""
    messages: list[dict] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing tests in the repository."},
    ]
    requests = []
    for t in range(history + turn):
        if t == history or (t < history and t % 10 == 9):
            messages.append({"role": "user", "content": f"Now step {t}: " + words(30, t)})
        cid = f"call_{t}"
        call = {"id": cid, "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": words(12, t), "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": cid, "content": words(size, t + 1)})
        requests.append({"model": "t", "messages": copy.deepcopy(messages)})
    return requests


def test_a_growing_newest_turn_moves_the_head_rarely():
    # A head that gives way to the newest turn re-sends the whole turn after it. Every jump
    # (an elision cut or a head shrink) lands at the low-water mark, so the next one waits
    # until the sent prompt grows by the headroom H = (1 − low_water) × budget again. Once
    # masked, a round of the turn grows the prompt by at most m (its call and placeholder), and
    # the newest unit, sent whole, varies by at most d: over the turn's R rounds the bytes
    # before it change at most R × m / (H − d) + 2 times (the first overflow, which also masks
    # the rounds before the turn, and rounding). A head shrinking just enough to fit changes
    # them on every round once the turn outgrows the room the head leaves.
    r = route(8000)
    policy = FitPolicy()
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, None)
    history, turn = 120, 80
    requests = long_turn_session(history, turn)
    base = requests[0]["messages"][:2]
    rounds = [b["messages"][-2:] for b in requests[history:]]
    full = [_price(base + unit, r) - _price(base, r) for unit in rounds]
    masked = [
        _price([*base, a, {**t, "content": mask_placeholder("sh", 99_999)}], r) - _price(base, r)
        for a, t in rounds
    ]
    m, d = max(masked), max(full) - min(full)
    headroom = (1 - policy.low_water) * budget
    assert headroom > d
    previous: list[dict] | None = None
    jumps = 0
    for body in requests[history:]:
        result = fit(parse_request(body), r, policy)
        out = result.body["messages"]
        assert turn_ids(body["messages"]) <= turn_ids(out), "a call of the newest turn dropped"
        if previous is not None:
            common = next(
                (i for i, (a, b) in enumerate(zip(previous, out, strict=False)) if a != b),
                min(len(previous), len(out)),
            )
            latest = max(i for i, msg in enumerate(out) if msg["role"] == "user")
            jumps += common <= latest
        previous = out
    assert result.report.actions["masked"].count and result.report.actions["elided_messages"].count
    assert jumps <= turn * m / (headroom - d) + 2


def _sent_outputs(body: dict) -> list[tuple[str, bool]]:
    """(call id, masked) of every tool result sent, in order."""
    return [
        (m["tool_call_id"], str(m["content"]).startswith(MASK_PREFIX))
        for m in body["messages"]
        if m["role"] == "tool"
    ]


def _runs(flags: list[bool]) -> list[tuple[bool, int, int]]:
    """(masked, start, end) of each run of equal flags."""
    out: list[tuple[bool, int, int]] = []
    for i, flag in enumerate(flags):
        if out and out[-1][0] == flag:
            out[-1] = (flag, out[-1][1], i + 1)
        else:
            out.append((flag, i, i + 1))
    return out


def test_the_head_keeps_its_outputs_until_the_masked_rest_no_longer_fits_beside_it():
    # Masking starts after the verbatim head (its outputs verbatim); once everything after it
    # is masked and the prompt still overflows, the head is masked too, all at once and for
    # good, and the next head starts where the masked conversation ends.
    r = route(24000)
    policy = FitPolicy(verbatim_head=0.7)
    budget = prompt_budget(r.context_window, r.max_output_tokens, policy, None)
    masked_once: set[str] = set()
    head_start = 0
    heads: set[int] = set()
    for body in agent_session(400):
        out = fit(parse_request(body), r, policy).body
        sent = _sent_outputs(out)[:-1]  # not the newest unit's
        ids = [call for call, _ in sent]
        flags = [masked for _, masked in sent]
        # An output once masked never comes back verbatim.
        assert not masked_once & {call for call, masked in sent if not masked}
        masked_once |= {call for call, masked in sent if masked}
        runs = _runs(flags)
        if True not in flags:
            continue
        # At most: a masked prefix, the verbatim head, the masked middle, what grew since.
        assert [m for m, _, _ in runs] in (
            [True],
            [True, False],
            [False, True],
            [False, True, False],
            [True, False, True],
            [True, False, True, False],
        )
        verbatim = next((run for run in runs if not run[0]), None)
        if verbatim is not None and verbatim[2] < len(flags):  # a head, with masked after it
            first = int(ids[verbatim[1]].removeprefix("call_"))
            assert first >= head_start  # the head's start only moves forward
            head_start = first
            heads.add(first)
            cut = [i for i, m in enumerate(out["messages"]) if m["role"] == "tool"][verbatim[2]]
            head = measure(parse_request({**out, "messages": out["messages"][:cut]}), r)
            assert head.total <= policy.verbatim_head * budget + 400  # whole units
    # More than one head over the session: a masked head is followed by a later one.
    assert len(heads) >= 2


def test_without_a_verbatim_head_masking_starts_at_the_first_output():
    r = route(24000)
    policy = FitPolicy(verbatim_head=0.0)
    for body in agent_session(120)[60:]:
        sent = _sent_outputs(fit(parse_request(body), r, policy).body)
        assert sent[0][1]


def _split_turns(requests: list[dict]) -> list[dict]:
    """The same session with every tool-calling assistant turn sent as two messages (its words,
    then its calls), as an Anthropic turn with a thinking block parses: one turn, two units."""
    out = []
    for body in requests:
        messages: list[dict] = []
        for m in body["messages"]:
            if m["role"] == "assistant" and m.get("tool_calls"):
                messages.append({"role": "assistant", "content": m["content"]})
                messages.append({**m, "content": None})
            else:
                messages.append(m)
        out.append({**body, "messages": messages})
    return out


@pytest.mark.parametrize("head", [0.0, 0.7])
def test_the_settled_mask_is_where_the_previous_request_s_masking_ends(head):
    # Fit.settled_mask names the last output masked before the first message that differs
    # from the previous request as sent (where the previous request's breakpoint wrote), also
    # when one assistant turn spans several units.
    r = route(24000)
    policy = FitPolicy(verbatim_head=head)
    previous: list[dict] | None = None
    checked = 0
    for body in _split_turns(agent_session(260)):
        result = fit(parse_request(body), r, policy)
        sent = result.body["messages"]
        if previous is not None:
            same = next(
                (i for i, (a, b) in enumerate(zip(previous, sent, strict=False)) if a != b),
                len(previous),
            )
            masked = [
                m["tool_call_id"]
                for m in sent[:same]
                if m["role"] == "tool" and str(m["content"]).startswith(MASK_PREFIX)
            ]
            if result.settled_mask is not None or masked:
                checked += 1
                assert result.settled_mask == (masked[-1] if masked else None)
        previous = sent
    assert checked > 50


def test_the_newest_turns_outputs_are_masked_only_when_it_does_not_fit_whole():
    """Issue 31: the newest turn is kept whole whenever it fits once everything older is masked
    or elided. A plan's own price is an upper bound (its markers priced at their widest), so the
    plan keeping the newest turn whole is built before any of its outputs is masked: whenever
    the fit masks an output of the newest turn, the same prompt with those outputs whole does
    not fit (with the bound alone, a few tokens of fitting prompt were masked). Every window
    across the change from masked to whole."""
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Task: " + words(30, 1)},
    ]
    for k in range(8):
        messages += [
            {"role": "assistant", "content": f"Looking at part {k}."},
            {"role": "user", "content": f"Part {k}: " + words(200, k + 2)},
        ]
    calls = [
        {"id": f"n{j}", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
        for j in range(2)
    ]
    messages += [
        {"role": "user", "content": "Now read the two files."},
        {"role": "assistant", "content": None, "tool_calls": calls},
    ]
    outputs = [
        {"role": "tool", "tool_call_id": f"n{j}", "content": words(150, 50 + j)} for j in (0, 1)
    ]
    body = {"model": "t", "messages": messages + outputs, "max_tokens": 256}
    # no capping: the newest outputs go whole or masked, nothing in between
    policy = FitPolicy(strategies=tuple(s for s in FitPolicy().strategies if s != "cap"))
    masked_seen = whole_seen = 0
    for window in range(780, 900):
        rw = route(window)
        result = fit(parse_request(body), rw, policy)
        sent = result.body["messages"]
        masked = [str(m["content"]).startswith(MASK_PREFIX) for m in sent[-2:]]
        if not any(masked):
            whole_seen += sent[-2:] == outputs
            continue
        masked_seen += 1
        unmasked = [o if m else s for o, m, s in zip(outputs, masked, sent[-2:], strict=True)]
        assert _price(sent[:-2] + unmasked, rw) > result.report.budget, window
    assert masked_seen and whole_seen


def test_an_output_shorter_than_its_placeholder_is_never_masked():
    """Masking "OK" (1 token) as "[routefit: output of run (7 tokens) masked ...]" (~20) made
    the prompt bigger: a mask dearer than its output leaves the output as it is, and the report
    counts only the masks that saved something."""
    messages: list[dict] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Task: " + words(40, 2)},
    ]
    for n in range(12):
        calls = [
            {"id": f"big{n}", "type": "function", "function": {"name": "run", "arguments": "{}"}},
            {"id": f"ok{n}", "type": "function", "function": {"name": "run", "arguments": "{}"}},
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages.append({"role": "tool", "tool_call_id": f"big{n}", "content": words(300, n)})
        messages.append({"role": "tool", "tool_call_id": f"ok{n}", "content": "OK"})
    messages.append({"role": "user", "content": "Now: " + words(20, 3)})
    r = route(4_000)
    fitted = fit(
        parse_request({"model": "t", "messages": messages, "max_tokens": 256}), r, FitPolicy()
    )
    sent = fitted.body["messages"]
    big = [m for m in sent if str(m.get("tool_call_id", "")).startswith("big")]
    ok = [m for m in sent if str(m.get("tool_call_id", "")).startswith("ok")]
    masked_big = sum(str(m["content"]).startswith(MASK_PREFIX) for m in big)
    assert masked_big  # the fit masked old outputs
    assert ok and all(m["content"] == "OK" for m in ok)
    assert fitted.report.actions["masked"].count == masked_big
