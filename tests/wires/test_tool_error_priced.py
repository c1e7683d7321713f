"""A failed tool's result sent to a chat provider carries ``[tool error]`` before its text
(``proxy.wires.anthropic_chat.TOOL_ERROR``); the estimate prices what is sent.

The parse cannot write the marker into the conversation: it runs before the route (and so the
leg) is known, and a marker part in the parsed form would be sent to a native Anthropic provider
too whenever the fit rewrote the result. It makes it the result's lead (``Message.lead``)
instead, kept by every rewrite of the fit; the estimate prices a leg the request is translated on
as translated (``Route.translated``, from the deployment the gateway sends it to), so the lead's
tokens are priced there, and only there, by the rule the translation writes it by
(``pricing.messages.led_text``). Until that, the estimate priced the parsed conversation, the
same whether the result failed or not, a few tokens under what was sent per failed result.

What is checked here: the estimate of a translated leg grows with the markers it sends (a
property over the results' texts); a native leg's neither sends nor prices one; a result the fit
capped renders within its cap with its marker, one it masked is priced with it; a chat provider
that counts what it receives never refuses a request for the markers' tokens; and Gemini's
``[function response]`` (a response that answers no call, sent as user text) is priced as sent
on a translated leg, not on a native one.

routefit in process (``run_inprocess``): the dry run (``POST /routefit/fit``) answers both the
request a leg would send and the estimate it goes on, before a scripted provider that is never
called; the overflow test goes to the simulator, which counts the tokens of what it receives and
refuses a prompt over its window.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anthropic
import httpx
import orjson
import pytest
import yaml
from harness import gateway_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inprocess import run_inprocess
from test_translation_hunt import ROUTES

from pricing.tokenizers import get_tokenizer
from proxy.sim.models import get_builtin, small_variant
from proxy.sim.server import SimServer
from proxy.transports.mock import MockTransport
from proxy.wires.anthropic_chat import TOOL_ERROR
from proxy.wires.gemini_parse import FUNCTION_RESPONSE
from strategies.mask import MASK_PREFIX

TOOLS = [{"name": "run", "input_schema": {"type": "object", "properties": {}}}]
#: The message cap of the ``capping`` route.
CAP = 200


def _chat_route(alias: str, fit: dict[str, Any], window: int = 2_000) -> dict[str, Any]:
    """A provider that speaks chat only (``deepseek/``: a Messages request to it is translated),
    priced by OpenAI's published rules (o200k, OpenAI's framing), its window ``window``."""
    return {
        "model_name": alias,
        "litellm_params": {
            "model": "deepseek/gpt-4o",
            "api_base": "http://provider.local/v1",
            "api_key": "sk-unused",
        },
        "model_info": {"max_input_tokens": window, "max_output_tokens": 1_024},
        "routefit": {"tokenizer": "o200k_base", "framing": "openai", "fit": fit},
    }


#: Google's own API: a Gemini client's request goes to it natively.
GEMINI_NATIVE = {
    "model_name": "gem",
    "litellm_params": {
        "model": "gemini/gemini-2.0-flash",
        "api_base": "http://provider.local/v1beta",
        "api_key": "sk-unused",
    },
    "model_info": {"max_input_tokens": 1_048_576, "max_output_tokens": 8_192},
}


async def _unused(request: httpx.Request) -> httpx.Response:
    raise AssertionError("a dry run forwards nothing")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    routes = [
        *ROUTES,
        _chat_route("capping", {"strategies": ["cap"], "message_cap_tokens": CAP}),
        _chat_route("masking", {"strategies": ["mask"]}),
        GEMINI_NATIVE,
    ]
    path = tmp_path_factory.mktemp("tool-error") / "routefit.yaml"
    path.write_text(
        yaml.safe_dump({"model_list": routes, "routefit_settings": {"store_path": ":memory:"}})
    )
    with run_inprocess(path, provider=lambda cfg: {"transport": MockTransport(_unused)}) as gw:
        yield gw


def body(outputs: list[str], failed: list[bool], model: str = "chat") -> dict[str, Any]:
    """A Messages conversation: one call per output, then its results (flagged as ``failed``)."""
    calls = [
        {"type": "tool_use", "id": f"t{i}", "name": "run", "input": {}} for i in range(len(outputs))
    ]
    results = [
        {"type": "tool_result", "tool_use_id": f"t{i}", "content": text, "is_error": bad}
        for i, (text, bad) in enumerate(zip(outputs, failed, strict=True))
    ]
    return _request(
        model,
        [
            {"role": "user", "content": "run them"},
            {"role": "assistant", "content": calls},
            {"role": "user", "content": results},
        ],
    )


def _request(model: str, messages: list[dict[str, Any]], max_tokens: int = 50) -> dict[str, Any]:
    """A Messages request of ``messages`` with the one tool they call."""
    return {"model": model, "max_tokens": max_tokens, "tools": TOOLS, "messages": messages}


def two_rounds(old: str, failed: bool, model: str) -> dict[str, Any]:
    """Two tool rounds: the older one's output ``old`` (flagged as ``failed``), which the fit may
    rewrite, then a newer one it keeps as it is (the round the newest user message answers)."""

    def call(i: int) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"t{i}", "name": "run", "input": {}}],
        }

    first = {"type": "tool_result", "tool_use_id": "t0", "content": old, "is_error": failed}
    second = {"type": "tool_result", "tool_use_id": "t1", "content": "done"}
    return _request(
        model,
        [
            {"role": "user", "content": "run them"},
            call(0),
            {"role": "user", "content": [first]},
            call(1),
            {"role": "user", "content": [second, {"type": "text", "text": "what failed?"}]},
        ],
    )


def dry_run(gw: Any, sent: dict[str, Any], wire: str = "messages") -> dict[str, Any]:
    """The dry run's answer: ``request`` (what the leg would send), ``report`` (the fit's)."""
    r = httpx.post(f"{gw.base_url}/routefit/fit", params={"wire": wire}, json=sent)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def priced(answer: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """(the chat request the leg would send, the estimate it goes on)."""
    return answer["request"], int(answer["report"]["estimate_before"])


def tool_contents(sent: dict[str, Any]) -> dict[str, Any]:
    """A chat request's tool messages' content, by call id."""
    return {m["tool_call_id"]: m["content"] for m in sent["messages"] if m["role"] == "tool"}


def big_output(tokens: int) -> str:
    """About ``tokens`` o200k tokens of distinct log lines."""
    tok = get_tokenizer("o200k_base")
    lines: list[str] = []
    while tok.count("\n".join(lines)) < tokens:
        lines.append(f"step {len(lines)}: cannot open /srv/data/{len(lines) % 89}.csv (errno 2)")
    return "\n".join(lines)


TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(outputs=st.lists(TEXTS, min_size=1, max_size=3))
def test_a_failed_results_marker_is_priced_as_it_is_sent(gw: Any, outputs: list[str]) -> None:
    """The same conversation with its results failed and not: the chat provider receives the
    marker in each failed one, so the estimate must be larger by what was added."""
    sent_ok, priced_ok = priced(dry_run(gw, body(outputs, [False] * len(outputs))))
    sent_bad, priced_bad = priced(dry_run(gw, body(outputs, [True] * len(outputs))))
    tools_bad = [m["content"] for m in sent_bad["messages"] if m["role"] == "tool"]
    assert all(str(c).startswith(TOOL_ERROR) for c in tools_bad)  # the premise: it is sent
    assert sent_ok != sent_bad
    assert priced_bad > priced_ok


def test_a_native_anthropic_leg_prices_and_sends_no_marker(gw: Any) -> None:
    """On an Anthropic provider the client's block goes with its own ``is_error``: no marker is
    sent, and none is priced (an estimate that priced the lead on every leg would be high here,
    by as much as it was low on a translated one)."""
    outputs = ["exit 2: no such file", ""]
    _, priced_ok = priced(dry_run(gw, body(outputs, [False, False], model="claude")))
    sent_bad, priced_bad = priced(dry_run(gw, body(outputs, [True, True], model="claude")))
    assert priced_bad == priced_ok
    results = [
        b
        for m in sent_bad["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert [b["is_error"] for b in results] == [True, True]
    assert TOOL_ERROR not in orjson.dumps(sent_bad).decode()


def test_a_capped_failed_result_renders_within_its_cap_with_its_marker(gw: Any) -> None:
    """A failed output cut to the route's message cap is sent with the marker before the cut:
    the cut leaves room for it, so the message as sent, marker included, is still within the
    cap (docs/capping.md: "capped messages render within their cap"); a cut priced without it
    came out over the cap by the marker's tokens."""
    tok = get_tokenizer("o200k_base")
    for old in (big_output(3_000), orjson.dumps({"rows": [big_output(40)] * 80}).decode()):
        answer = dry_run(gw, two_rounds(old, True, "capping"))
        assert answer["report"]["actions"]["capped"]["messages"] == 1, answer["report"]
        content = tool_contents(answer["request"])["t0"]
        assert content.startswith(f"{TOOL_ERROR} ")
        # OpenAI's published framing of a message: 3 tokens, its role, its fields (the call id)
        framing = 3 + tok.count("tool") + tok.count("t0")
        assert tok.count(content) + framing <= CAP


def test_a_masked_failed_result_is_priced_with_its_marker(gw: Any) -> None:
    """A failed output the fit masked still says it failed, before its placeholder, and the
    estimate of what the fit sends prices that marker: the same masked conversation costs more
    when the masked output failed (a price memoised for the placeholder alone would not)."""
    old = big_output(3_000)
    ok = dry_run(gw, two_rounds(old, False, "masking"))
    bad = dry_run(gw, two_rounds(old, True, "masking"))
    for answer in (ok, bad):
        assert answer["report"]["actions"]["masked"]["messages"] == 1, answer["report"]
    assert tool_contents(ok["request"])["t0"].startswith(MASK_PREFIX)
    assert tool_contents(bad["request"])["t0"].startswith(f"{TOOL_ERROR} {MASK_PREFIX}")
    marker = get_tokenizer("o200k_base").count(TOOL_ERROR)
    after = bad["report"]["estimate_after"] - ok["report"]["estimate_after"]
    assert after >= marker
    assert bad["report"]["estimate_after"] <= bad["report"]["budget"]


# -- Gemini's [function response] ----------------------------------------------------------------


def gemini_round(response_id: str, model: str) -> dict[str, Any]:
    """A Gemini conversation whose one response names the call ``c1`` (``response_id="c1"``) or
    none (another id, and a name no call has: it answers no call)."""
    call = {"functionCall": {"id": "c1", "name": "run", "args": {}}}
    response = {"functionResponse": {"id": response_id, "name": "look", "response": {"out": "x"}}}
    return {
        "model": model,
        "contents": [
            {"role": "user", "parts": [{"text": "run it"}]},
            {"role": "model", "parts": [call]},
            {"role": "user", "parts": [response, {"text": "and?"}]},
        ],
    }


def test_a_gemini_response_answering_no_call_is_priced_as_sent(gw: Any) -> None:
    """A response that answers no call goes to a chat provider as user text with
    ``[function response]`` before it; the estimate of that leg prices those words."""
    sent_paired, priced_paired = priced(dry_run(gw, gemini_round("c1", "chat"), "gemini"))
    sent_orphan, priced_orphan = priced(dry_run(gw, gemini_round("c2", "chat"), "gemini"))
    assert tool_contents(sent_paired) == {"c1": '{"out":"x"}'}
    said = [m["content"] for m in sent_orphan["messages"] if m["role"] == "user"]
    assert f'{FUNCTION_RESPONSE} {{"out":"x"}}' in said
    assert priced_orphan > priced_paired


def test_a_native_gemini_leg_prices_no_function_response_words(gw: Any) -> None:
    """Google's API takes the response as it came, answering no call or not: nothing is added,
    and nothing priced."""
    _, priced_paired = priced(dry_run(gw, gemini_round("c1", "gem"), "gemini"))
    sent_orphan, priced_orphan = priced(dry_run(gw, gemini_round("c2", "gem"), "gemini"))
    assert priced_orphan == priced_paired
    assert FUNCTION_RESPONSE not in orjson.dumps(sent_orphan).decode()


# -- a provider that counts the markers ----------------------------------------------------------

#: The simulator's window (and routefit's for it), and its model there.
WINDOW = 4_096
SIM_MODEL = "gpt-4o-tool-errors"
#: Failed results in the overflow test: their markers are ~120 tokens at the simulator.
RESULTS = 30


@pytest.fixture(scope="module")
def counted(sim: SimServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """routefit before the simulator's gpt-4o with a 4,096-token window, reached by a chat-only
    provider (a Messages request is translated), priced by the simulator's own rules (o200k,
    OpenAI's framing, 3 tokens a call) with no safety margin and a calibration that never
    moves: what the fit lets go is what the simulator counts, to the markers."""
    sim.state.add_model(
        replace(small_variant(get_builtin("gpt-4o"), WINDOW, 1_024), name=SIM_MODEL)
    )
    route = {
        "model_name": "tiny",
        "litellm_params": {
            "model": f"deepseek/{SIM_MODEL}",
            "api_base": f"{sim.base_url}/v1",
            "api_key": "sk-sim",
        },
        "model_info": {"max_input_tokens": WINDOW, "max_output_tokens": 1_024},
        "routefit": {
            "tokenizer": "o200k_base",
            "framing": {"family": "openai", "per_tool_call": 3},
            "fit": {"safety_margin": 0},
        },
    }
    path = tmp_path_factory.mktemp("tool-error-sim") / "routefit.yaml"
    frozen = {"min_samples": 100_000, "window": 100_000}
    with run_inprocess(gateway_config(path, [route], calibration=frozen)) as running:
        yield running


def session(notes: int, failed: bool) -> dict[str, Any]:
    """An agent's session: the task, an older exchange of ``notes`` words (what the fit may
    elide), then a round of ``RESULTS`` calls whose short results all failed (or none did)."""
    calls = [
        {"type": "tool_use", "id": f"t{i}", "name": "run", "input": {}} for i in range(RESULTS)
    ]
    results = [
        {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"exit {i}", "is_error": failed}
        for i in range(RESULTS)
    ]
    return _request(
        "tiny",
        [
            {"role": "user", "content": "Run the checks."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "note " * notes},
            {"role": "assistant", "content": [{"type": "text", "text": "Running."}, *calls]},
            {"role": "user", "content": [*results, {"type": "text", "text": "Which failed?"}]},
        ],
        max_tokens=64,
    )


def test_the_markers_never_overflow_a_provider_that_counts_them(
    counted: Any, fresh_sim: SimServer
) -> None:
    """The session, its older exchange grown until the estimate of it *without* failures just
    fits the budget; then every result failed. The markers push it over the window: the fit
    must see them (and elide the older exchange), not let it go for the provider to refuse.
    Before the estimate priced them, the simulator refused it for context length (and routefit
    refitted it after the refusal: the client never saw it, the provider did)."""
    lo, hi = 0, 4 * WINDOW  # notes: lo fits untouched, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        report = dry_run(counted, session(mid, False))["report"]
        lo, hi = (mid, hi) if report["estimate_before"] <= report["budget"] else (lo, mid)
    report = dry_run(counted, session(lo, False))["report"]
    assert report["budget"] - report["estimate_before"] < RESULTS  # the premise: it just fits
    client = anthropic.Anthropic(base_url=counted.base_url, api_key="unused", max_retries=0)
    raw = client.messages.with_raw_response.create(**session(lo, True))
    assert raw.parse().content
    assert "elided" in raw.headers["x-routefit-actions"]
    seen = fresh_sim.requests(path="/v1/chat/completions")
    assert [e["status"] for e in seen] == [200]
    (entry,) = seen
    assert entry["prompt_tokens"] + 64 <= WINDOW
    sent = tool_contents(fresh_sim.last_request("/v1/chat/completions")["body"])
    assert all(c.startswith(TOOL_ERROR) for c in sent.values()) and len(sent) == RESULTS
