"""The tool round the latest user message answers is kept whatever ends the conversation.

``strategies.units`` protects the newest unit and, when it is a user message right after a tool
round, that round. A conversation whose tail is not that user message alone made something else
the newest unit: a ``system`` / ``developer`` note after it (OpenAI chat and the Responses wire
take them anywhere; Claude Code sends ``role: system`` entries inside Messages' ``messages``),
or a note or an earlier user message between the round and it. The round then lost its
protection and its outputs were masked like any old round's, while the same conversation ending
with the user message kept them. Now the conversation's tail is one unit with what it answers
(``strategies.units._tail``)."""

from __future__ import annotations

import copy
import random

import pytest
from test_fit import route

from pricing.messages import parse_request
from strategies.fit import fit
from strategies.policy import FitPolicy
from strategies.units import group_units, protected_units

WORDS = "alpha beta gamma delta token window budget request provider route cache page".split()
ROUNDS = 30
QUESTION = {"role": "user", "content": "Now summarise the last file. " + "please " * 1500}
NOTE = {"role": "developer", "content": "Answer in one paragraph."}


def text(rnd: random.Random, n: int) -> str:
    return " ".join(f"{rnd.choice(WORDS)}{rnd.randint(0, 99)}" for _ in range(n))


def session() -> list[dict]:
    """A task and tool rounds, the newest one's output under the cap: the latest question
    (long) makes the prompt overflow, so older outputs are masked."""
    rnd = random.Random(3)
    messages: list[dict] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Task: " + text(rnd, 20)},
    ]
    for k in range(ROUNDS):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": "Reading.", "tool_calls": [call]})
        size = 350 if k == ROUNDS - 1 else 100
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": text(rnd, size)})
    return messages


TAILS = {
    "question": [QUESTION],
    "system after": [QUESTION, {"role": "system", "content": "Answer in one paragraph."}],
    "developer after": [QUESTION, NOTE],
    "developer before": [NOTE, QUESTION],
    "two user messages": [{"role": "user", "content": "I read it too."}, QUESTION],
    "developer and prefill": [QUESTION, NOTE, {"role": "assistant", "content": "The"}],
}


@pytest.mark.parametrize("tail", TAILS, ids=list(TAILS))
def test_the_round_the_latest_user_message_answers_is_kept(tail: str) -> None:
    messages = session() + TAILS[tail]
    newest = messages[2 * ROUNDS + 1]
    body = {"model": "t", "messages": copy.deepcopy(messages), "max_tokens": 256}
    fitted = fit(parse_request(body), route(8192), FitPolicy())
    sent = fitted.body["messages"]
    assert "masked=" in fitted.report.actions.header()
    assert sent[-len(TAILS[tail]) :] == TAILS[tail]
    results = [m for m in sent if m.get("tool_call_id") == newest["tool_call_id"]]
    assert results == [newest], f"{tail}: the round the question answers went masked"


@pytest.mark.parametrize("tail", TAILS, ids=list(TAILS))
def test_the_tail_and_the_round_it_answers_are_protected(tail: str) -> None:
    messages = parse_request({"model": "t", "messages": session() + TAILS[tail]}).messages
    units = group_units(messages)
    keep = protected_units(messages, units)
    kept = {i for u in keep for i in range(units[u].start, units[u].end)}
    assert set(range(2 * ROUNDS, len(messages))) <= kept
