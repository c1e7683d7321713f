"""The newest turn's tool outputs exceed the budget: forwarded, not refused, on every wire.

routefit (in-process, over loopback) between the real openai / anthropic SDKs and the simulator
(which rejects overflow). An agent's newest turn carries eight parallel outputs, each under the
rendered-form cap and together over the whole 8k budget — the first release refused such a
request with 400 ``context_length_exceeded``. Now the oldest of them are masked (the calls stay)
and the simulator accepts the request on the chat, Messages and Responses wires."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess

from pricing.tokenizers import get_tokenizer
from strategies.mask import MASK_PREFIX

CALLS = [f"call_{k}" for k in range(8)]
MAX_TOKENS = 256


def output(k: int, tokens: int = 1050) -> str:
    """About ``tokens`` o200k tokens of distinct log lines (under the 8k route's cap)."""
    tok = get_tokenizer("o200k_base")
    lines: list[str] = []
    while tok.count("\n".join(lines)) < tokens:
        lines.append(f"log {k} line {len(lines)}: request served in {len(lines) % 97} ms")
    return "\n".join(lines)


def _routes(sim) -> list[dict]:
    info = {"max_input_tokens": 8192, "max_output_tokens": 4096}
    return [
        sim_route("oa-small", sim.base_url, "gpt-4o-small", model_info=info),
        {
            "model_name": "an-small",
            "litellm_params": {
                "model": "anthropic/claude-sim-small",
                "api_base": sim.base_url,
                "api_key": "sk-ant-sim",
            },
            "model_info": info,
        },
    ]


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    config = gateway_config(tmp_path_factory.mktemp("fit31") / "routefit.yaml", _routes(sim))
    with run_inprocess(config) as running:
        yield running


@pytest.fixture(scope="module")
def gw_fixed(sim, tmp_path_factory):
    """A gateway that never learns a correction: prices, hence cut points, stay put between
    requests, so a cache test sees the schedule's own moves and no others."""
    path = tmp_path_factory.mktemp("fit31-fixed") / "routefit.yaml"
    frozen = {"min_samples": 100_000, "window": 100_000}
    config = gateway_config(path, _routes(sim), calibration=frozen)
    with run_inprocess(config) as running:
        yield running


def check_forwarded(actions: str, sent: str) -> None:
    """Every call is still answered; the oldest output goes masked, or capped to the room its
    mask left (``strategies.moves._squeezed``), the newest verbatim."""
    assert "masked=" in actions or "capped=" in actions
    for call in CALLS:
        assert sent.count(json.dumps(call)) >= 2  # the call and its result
    assert json.dumps(output(len(CALLS) - 1))[1:-1] in sent  # the newest output verbatim
    oldest = json.dumps(output(0))[1:-1]
    assert oldest not in sent  # the oldest masked or cut
    assert MASK_PREFIX in sent or oldest[:200] in sent


def test_chat(gw, fresh_sim):
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    calls = [
        {"id": c, "type": "function", "function": {"name": "cat", "arguments": "{}"}} for c in CALLS
    ]
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Read every log and tell me what is slow."},
        {"role": "assistant", "content": "Reading all eight.", "tool_calls": calls},
        *({"role": "tool", "tool_call_id": c, "content": output(k)} for k, c in enumerate(CALLS)),
    ]
    raw = client.chat.completions.with_raw_response.create(
        model="oa-small", messages=messages, max_tokens=MAX_TOKENS
    )
    reply = raw.parse()
    assert reply.choices[0].message is not None
    sent = fresh_sim.last_request("/v1/chat/completions")
    check_forwarded(raw.headers["x-routefit-actions"], json.dumps(sent["body"]))


def test_messages(gw, fresh_sim):
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    uses = [{"type": "tool_use", "id": c, "name": "cat", "input": {}} for c in CALLS]
    results = [
        {"type": "tool_result", "tool_use_id": c, "content": output(k)} for k, c in enumerate(CALLS)
    ]
    raw = client.messages.with_raw_response.create(
        model="an-small",
        max_tokens=MAX_TOKENS,
        system="You are a coding agent.",
        tools=[{"name": "cat", "description": "Read a log", "input_schema": {"type": "object"}}],
        messages=[
            {"role": "user", "content": "Read every log and tell me what is slow."},
            {"role": "assistant", "content": [{"type": "text", "text": "Reading all."}, *uses]},
            {"role": "user", "content": results},
        ],
    )
    assert raw.parse().content
    sent = fresh_sim.last_request("/v1/messages")
    check_forwarded(raw.headers["x-routefit-actions"], json.dumps(sent["body"]))


def test_responses(gw, fresh_sim):
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    items: list[dict] = [
        {"type": "message", "role": "user", "content": "Read every log and tell me what is slow."}
    ]
    items += [
        {"type": "function_call", "call_id": c, "name": "cat", "arguments": "{}"} for c in CALLS
    ]
    items += [
        {"type": "function_call_output", "call_id": c, "output": output(k)}
        for k, c in enumerate(CALLS)
    ]
    raw = client.responses.with_raw_response.create(
        model="oa-small",
        instructions="You are a coding agent.",
        input=items,
        max_output_tokens=MAX_TOKENS,
        store=False,
    )
    assert raw.parse().status == "completed"
    sent = fresh_sim.last_request()
    check_forwarded(raw.headers["x-routefit-actions"], json.dumps(sent["body"]))


def test_messages_reads_back_the_previous_request_when_the_fit_kept_it(gw_fixed, fresh_sim):
    # The client marks its last block, as agents do; routefit marks the pinned head (or the
    # masked outputs' end) and the block where the previous request ended. Whenever the fit
    # changed nothing the previous request sent, the provider reads it all back from there,
    # however far behind the head or the masked outputs it lies.
    client = anthropic.Anthropic(base_url=gw_fixed.base_url, api_key="unused", max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "Read the logs one by one."}]
    tool = [{"name": "cat", "description": "Read a log", "input_schema": {"type": "object"}}]
    previous: tuple[list, int, str] | None = None  # (sent, written, actions)
    kept = steps = unpinned = 0
    for k in range(40):
        cid = f"r{k}"
        use = {"type": "tool_use", "id": cid, "name": "cat", "input": {}}
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"{k}"}, use]})
        result = {"type": "tool_result", "tool_use_id": cid, "content": output(k, 300)}
        messages.append({"role": "user", "content": [{**result, "cache_control": _EPH}]})
        if k:  # the client moves its breakpoint to the new last block
            messages[-3] = {**messages[-3], "content": [result_of(messages[-3])]}
        raw = client.messages.with_raw_response.create(
            model="an-small", max_tokens=MAX_TOKENS, system="Agent.", tools=tool, messages=messages
        )
        usage = raw.parse().usage
        # Where the previous request's last breakpoint (the client's) wrote: read + creation.
        written = (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
        sent = [_plain(m) for m in fresh_sim.last_request("/v1/messages")["body"]["messages"]]
        actions = raw.headers["x-routefit-actions"]
        fitted = actions != "none"
        if fitted and previous is not None and sent[: len(previous[0])] == previous[0]:
            kept += 1
            assert (usage.cache_read_input_tokens or 0) >= previous[1], k
        elif previous is not None and _masked(sent)[: len(_masked(previous[0]))] != _masked(
            previous[0]
        ):
            # The verbatim head's outputs masked (once, all at once): like the first mask step,
            # the prompt is re-sent from the head's first output.
            unpinned += 1
        elif previous is not None and "elided" not in actions + previous[2]:
            # A mask step: what both requests share ends at the previous request's last masked
            # output, where routefit's breakpoint stood then and stands now (over 1,024 tokens
            # of masked rounds here: the simulator's minimum).
            steps += 1
            assert (usage.cache_read_input_tokens or 0) > 0, k
        previous = (sent, written, actions) if "masked" in actions else None
    assert kept >= 10 and steps >= 1 and unpinned <= 1


_EPH = {"type": "ephemeral"}


def result_of(message: dict) -> dict:
    return {k: v for k, v in message["content"][0].items() if k != "cache_control"}


def _masked(sent: list[dict]) -> list[str]:
    """The call ids whose outputs were sent masked, in order."""
    return [
        b["tool_use_id"]
        for m in sent
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and MASK_PREFIX in json.dumps(b.get("content"))
    ]


def _plain(message: dict) -> dict:
    """A sent message without its cache breakpoints (they move; the prefix is what counts)."""
    content = message["content"]
    if isinstance(content, list):
        content = [{k: v for k, v in b.items() if k != "cache_control"} for b in content]
    return {**message, "content": content}
