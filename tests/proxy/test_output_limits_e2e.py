"""Output limits through routefit (in-process), on every wire, with the real SDKs and the simulator
(which refuses an output cap above the model's limit, and a prompt plus cap above the window,
as the providers do).

Per wire: a cap above the route's limit is clamped (200, ``x-routefit-output-clamped``, the
provider sees the limit); a prompt that fits only beside a smaller reservation is forwarded
with the cap shrunk to the room it leaves; one that does not fit even beside the floor (1,024)
is refused in the wire's own shape, naming the reservation and the cap that would fit.
"""

from __future__ import annotations

import re

import anthropic
import openai
import pytest
from harness import claude_route, gateway_config, sim_route
from inprocess import asgi_provider_available, loopback, run_inprocess, sim_provider

from pricing.tokenizers import get_tokenizer

WINDOW, LIMIT = 8192, 4096
MARGIN = 81  # 1% of the window
#: A prompt of ~5,000 tokens: over the budget beside a 4,096 cap (4,015), under it beside the
#: floor of 1,024 (7,087).
SHRINKS = "alpha " * 5000
#: ~7,500 tokens: over the budget beside the floor; under the window less the margin.
REFUSED = "alpha " * 7500


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    url = sim.base_url
    info = {"max_input_tokens": WINDOW, "max_output_tokens": LIMIT}
    routes = [
        sim_route("big", url, "gpt-4o"),  # 128k window, 16,384 output (litellm's map)
        sim_route("small", url, "gpt-4o-small", model_info=info),
        claude_route("claude-small", url, "claude-sim-small", **info),
        # issue 31's example: a window smaller than the route's own output limit
        sim_route(
            "cramped",
            url,
            "gpt-4o-small",
            model_info={"max_input_tokens": 3000, "max_output_tokens": LIMIT},
        ),
    ]
    config = gateway_config(tmp_path_factory.mktemp("gw") / "routefit.yaml", routes)
    # The provider in-process too (the simulator's ASGI app through proxy.transports.mock)
    # where that transport exists; else the same simulator over loopback.
    provider = sim_provider(sim) if asgi_provider_available() else loopback
    with run_inprocess(config, provider=provider) as running:
        yield running


@pytest.fixture
def oai(gw):
    return openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)


@pytest.fixture
def claude(gw):
    return anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _shrunk(fresh_sim, path: str, key: str, headers, asked: int) -> None:
    """The provider got a cap shrunk to the room its prompt left, and the header says so."""
    seen = fresh_sim.last_request(path)
    sent = seen["body"][key]
    assert 1024 <= sent < asked
    assert seen["prompt_tokens"] + sent + MARGIN <= WINDOW  # the margin is still kept free
    assert headers["x-routefit-output-clamped"] == f"{asked}->{sent}"


# -- Chat Completions ----------------------------------------------------------------------


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("stream", [False, True])
def test_chat_cap_above_the_limit_is_clamped(oai, fresh_sim, key, stream):
    raw = oai.chat.completions.with_raw_response.create(
        model="small", messages=_user("Hello"), stream=stream, **{key: 32_000}
    )
    reply = raw.parse()
    if stream:
        assert "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
    else:
        assert reply.choices[0].message.content
    assert raw.headers["x-routefit-output-clamped"] == "32000->4096"
    assert fresh_sim.last_request("/v1/chat/completions")["body"][key] == LIMIT


def test_chat_cap_within_the_limit_is_untouched(oai, fresh_sim):
    raw = oai.chat.completions.with_raw_response.create(
        model="small", messages=_user("Hello"), max_tokens=100
    )
    assert "x-routefit-output-clamped" not in raw.headers
    assert fresh_sim.last_request("/v1/chat/completions")["body"]["max_tokens"] == 100


def test_chat_cap_is_shrunk_to_the_room_beside_the_prompt(oai, fresh_sim):
    raw = oai.chat.completions.with_raw_response.create(
        model="small", messages=_user(SHRINKS), max_tokens=LIMIT
    )
    assert raw.parse().choices[0].message.content
    _shrunk(fresh_sim, "/v1/chat/completions", "max_tokens", raw.headers, LIMIT)


def test_chat_refusal_names_the_reservation_and_the_cap_that_fits(oai, fresh_sim):
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model="small", messages=_user(REFUSED), max_tokens=LIMIT)
    error = info.value.body
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_tokens"
    found = re.search(r"Set an output cap of ([\d,]+) or less", error["message"])
    assert found, error["message"]
    assert 1 <= int(found[1].replace(",", "")) < 1024
    assert "output reservation (max_tokens)" in error["message"]
    assert fresh_sim.requests() == []  # never forwarded to fail at the provider


# -- Anthropic Messages --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "limit", "path"),
    [
        ("claude-small", LIMIT, "/v1/messages"),  # native passthrough
        ("big", 16_384, "/v1/chat/completions"),  # translated: the README's Claude Code case
    ],
)
def test_messages_cap_above_the_limit_is_clamped(claude, fresh_sim, model, limit, path):
    raw = claude.messages.with_raw_response.create(
        model=model, max_tokens=32_000, messages=_user("Hi"), timeout=60
    )
    assert raw.parse().content[0].text
    assert raw.headers["x-routefit-output-clamped"] == f"32000->{limit}"
    assert fresh_sim.last_request(path)["body"]["max_tokens"] == limit


@pytest.mark.parametrize("asked", [32_000, LIMIT])
def test_a_short_prompt_beside_a_cap_larger_than_the_window_is_served(claude, fresh_sim, asked):
    # issue 31: "prompt is too long: 3009 tokens > 3000 maximum" for a 9-token prompt
    raw = claude.messages.with_raw_response.create(
        model="cramped", max_tokens=asked, messages=_user("Hi"), timeout=60
    )
    assert raw.parse().content[0].text
    sent = fresh_sim.last_request("/v1/chat/completions")["body"]["max_tokens"]
    prompt = int(raw.headers["x-routefit-prompt-tokens"])
    assert sent == 3000 - 32 - prompt  # all the room the prompt leaves, less the margin
    assert raw.headers["x-routefit-output-clamped"] == f"{asked}->{sent}"


def test_messages_thinking_budget_goes_under_a_clamped_cap(claude, fresh_sim):
    # Anthropic counts thinking within max_tokens and refuses a budget that is not below it
    raw = claude.messages.with_raw_response.create(
        model="claude-small",
        max_tokens=32_000,
        thinking={"type": "enabled", "budget_tokens": 20_000},
        messages=_user("Hi"),
        timeout=60,
    )
    assert raw.parse().content
    sent = fresh_sim.last_request("/v1/messages")["body"]
    assert sent["max_tokens"] == LIMIT
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": LIMIT - 1}


def test_messages_cap_is_shrunk_to_the_room_beside_the_prompt(claude, fresh_sim):
    raw = claude.messages.with_raw_response.create(
        model="claude-small", max_tokens=LIMIT, messages=_user(SHRINKS)
    )
    assert raw.parse().content[0].text
    _shrunk(fresh_sim, "/v1/messages", "max_tokens", raw.headers, LIMIT)


def _claude_refused(claude: anthropic.Anthropic) -> str:
    """A prompt over the budget beside the floor, under the window less the margin, as routefit
    counts it on the Claude route: its closed tokenizer is priced high on purpose until the
    route has learnt (docs/calibration.md), and a refusal is made on the meter's own count
    (``proxy.estimate.Job.fit``), so the words are measured with the route's tokenizer, and
    the prior's price of them (``count_tokens``) is checked to be over the window."""
    legacy = get_tokenizer("anthropic-legacy")
    target = WINDOW - MARGIN - 512  # between the floor's room (1,024) and a minimal prompt
    words = target - legacy.count("alpha " * 100) + 100  # one token a word, and a few more
    prior = claude.messages.count_tokens(model="claude-small", messages=_user("alpha " * words))
    assert prior.input_tokens > WINDOW  # the prior alone would have refused it as too long
    return "alpha " * words


def test_messages_refusal_is_anthropics_own_and_names_the_cap_that_fits(claude, fresh_sim):
    refused = _claude_refused(claude)
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model="claude-small", max_tokens=LIMIT, messages=_user(refused))
    message = info.value.body["error"]["message"]
    assert info.value.body["error"]["type"] == "invalid_request_error"
    # the words Claude Code parses to retry with a cap that fits (not "prompt is too long",
    # on which it would compact a conversation that is not the problem)
    found = re.match(
        r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)", message
    )
    assert found, message
    prompt, asked, window = map(int, found.groups())
    assert (asked, window) == (LIMIT, WINDOW) and prompt + 1024 > window
    assert f"Set an output cap of {window - prompt:,} or less" in message
    assert "prompt is too long" not in message
    assert fresh_sim.requests() == []


def test_the_simulator_refuses_a_cap_above_the_limit_on_every_wire(fresh_sim):
    """What makes the tests above honest: the provider simulator refuses what routefit clamps."""
    base = fresh_sim.url("/v1")
    oai = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="max_tokens is too large"):
        oai.chat.completions.create(model="gpt-4o-small", messages=_user("Hi"), max_tokens=32_000)
    with pytest.raises(openai.BadRequestError, match="max_output_tokens"):
        oai.responses.create(model="gpt-4o-small", input="Hi", max_output_tokens=32_000)
    direct = anthropic.Anthropic(base_url=fresh_sim.base_url, api_key="x", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="maximum allowed"):
        direct.messages.create(
            model="claude-sim-small", max_tokens=32_000, messages=_user("Hi"), timeout=60
        )
    with pytest.raises(anthropic.BadRequestError, match=r"thinking\.budget_tokens"):
        direct.messages.create(
            model="claude-sim-small",
            max_tokens=2000,
            thinking={"type": "enabled", "budget_tokens": 2000},
            messages=_user("Hi"),
        )


# -- Responses -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_responses_cap_above_the_limit_is_clamped(oai, fresh_sim, stream):
    raw = oai.responses.with_raw_response.create(
        model="small", input="Hello", max_output_tokens=32_000, stream=stream, store=False
    )
    reply = raw.parse()
    if stream:
        assert [e.type for e in reply][-1] == "response.completed"
    else:
        assert reply.output_text
    assert raw.headers["x-routefit-output-clamped"] == "32000->4096"
    assert fresh_sim.last_request("/v1/responses")["body"]["max_output_tokens"] == LIMIT


def test_responses_cap_is_shrunk_to_the_room_beside_the_prompt(oai, fresh_sim):
    raw = oai.responses.with_raw_response.create(
        model="small", input=SHRINKS, max_output_tokens=LIMIT, store=False
    )
    assert raw.parse().output_text
    _shrunk(fresh_sim, "/v1/responses", "max_output_tokens", raw.headers, LIMIT)


def test_responses_refusal_names_the_reservation(oai, fresh_sim):
    with pytest.raises(openai.BadRequestError) as info:
        oai.responses.create(model="small", input=REFUSED, max_output_tokens=LIMIT, store=False)
    error = info.value.body
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == "max_output_tokens"
    assert re.search(r"Set an output cap of [\d,]+ or less", error["message"])
    assert "output reservation (max_output_tokens)" in error["message"]
    assert fresh_sim.requests() == []
