"""A prefilled answer (a final assistant message the model continues) keeps the turn it answers.

Anthropic lets a request end with an assistant message: the model continues it. What the model
answers then is the latest user message, and the tool results that message carries, exactly as
without the prefill. The fit's units made the prefill the newest unit, so the protection the
newest unit gives the round it answers (``strategies.units.answered_rounds``) went to the
prefill instead: the latest tool results were masked (or elided with their call) like any old
round, and the model was asked to summarise a file it was shown only as "output masked". Now a
trailing assistant message without tool calls is one unit with the unit before it
(``strategies.units.group_units``), so the round it answers is kept as it is without the prefill.

routefit in process between httpx and the simulator (which refuses a request over its window).
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest
from harness import claude_route, gateway_config
from inprocess import run_inprocess

from strategies.mask import MASK_PREFIX

WORDS = "alpha beta gamma delta token window budget request provider route cache page".split()
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
TOOLS = [{"name": "read", "input_schema": SCHEMA}]


def text(rnd: random.Random, n: int) -> str:
    return " ".join(f"{rnd.choice(WORDS)}{rnd.randint(0, 99)}" for _ in range(n))


def session(rounds: int, size: int, newest: int) -> list[dict[str, Any]]:
    """A task, ``rounds`` tool rounds of ``size`` words each, the newest one's output ``newest``
    words long and followed (in the same user message) by the user's request about it."""
    rnd = random.Random(3)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: " + text(rnd, 20)}]
    for k in range(rounds):
        use = {"type": "tool_use", "id": f"toolu_{k}", "name": "read", "input": {"q": str(k)}}
        said = {"type": "text", "text": "Reading."}
        messages.append({"role": "assistant", "content": [said, use]})
        words = newest if k == rounds - 1 else size
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": text(rnd, words)}
        messages.append({"role": "user", "content": [result]})
    messages[-1]["content"].append({"type": "text", "text": "Now summarise the last file."})
    return messages


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    route = claude_route(
        "claude-small",
        sim.base_url,
        "claude-sim-small",
        max_input_tokens=8192,
        max_output_tokens=4096,
    )
    config = gateway_config(tmp_path_factory.mktemp("prefill") / "routefit.yaml", [route])
    with run_inprocess(config) as running:
        yield running


def newest_result(sent: list[dict[str, Any]], use_id: str) -> dict[str, Any]:
    found = [
        block
        for message in sent
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result" and block.get("tool_use_id") == use_id
    ]
    assert len(found) == 1, f"the newest result {use_id} was not sent"
    return found[0]


def result_text(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else content[0]["text"]


NOTE = {"role": "system", "content": "Answer in one paragraph."}


@pytest.mark.parametrize(
    ("note", "prefill"), [(False, None), (False, "The last file"), (True, None), (True, "The")]
)
def test_the_round_a_prefilled_answer_answers_is_kept(gw, fresh_sim, note, prefill):
    """With a ``role: system`` note after the latest user message too (Claude Code sends such
    entries inside ``messages``): the note was the newest unit alone, as the prefill was."""
    messages = session(rounds=30, size=100, newest=2000)
    if note:
        messages.append(NOTE)
    if prefill is not None:
        messages.append({"role": "assistant", "content": prefill})
    body = {"model": "claude-small", "max_tokens": 4096, "tools": TOOLS, "messages": messages}
    r = httpx.post(gw.base_url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["x-routefit-actions"] != "none"
    sent = fresh_sim.last_request("/v1/messages")["body"]["messages"]
    if prefill is not None:
        assert sent[-1] == messages[-1]
        sent = sent[:-1]
    if note:
        assert sent[-1] == NOTE
        sent = sent[:-1]
    newest = newest_result(sent, "toolu_29")
    assert not result_text(newest).startswith(MASK_PREFIX)
    assert sent[-1]["content"][-1]["text"] == "Now summarise the last file."
    turns = [m["content"] for m in sent if m["role"] == "assistant"]
    assert any(isinstance(b, dict) and b.get("id") == "toolu_29" for c in turns for b in c)
