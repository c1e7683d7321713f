"""The simulator as an oracle: texts its tokenizers could not count, and overflow refused as
each provider refuses it on every wire.

Expected counts are worked out here with tiktoken directly (pre-tokenizing by hand), never by
asking the simulator's own counting code."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import sim_fixtures as fixtures
import tiktoken

from proxy.sim.tokens import litellm_tokenizer_dir

sim = fixtures.sim
fresh_sim = fixtures.fresh_sim

#: Long enough that tiktoken's regex engine gives up (about a million backtracking steps).
RUN = 1_000_000


def _encoding(name: str) -> Any:
    """tiktoken's encoding from litellm's offline copy (no network in tests)."""
    import os

    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(litellm_tokenizer_dir()))
    return tiktoken.get_encoding(name)


def _spaces_then_word(name: str, space: str) -> int:
    """Tokens of ``space * RUN + "x"`` as the encoding's pattern splits it: ``\\s+(?!\\S)``
    takes all but the last whitespace character, which then leads the word (`` x``)."""
    enc = _encoding(name)
    run = enc._encode_single_piece((space * (RUN - 1)).encode())
    return len(run) + len(enc.encode_ordinary(space + "x"))


def _chat_prompt(sim: Any, content: str) -> httpx.Response:
    body = {"model": "gpt-4o", "max_tokens": 5, "messages": [{"role": "user", "content": content}]}
    return httpx.post(sim.url("/v1/chat/completions"), json=body, timeout=120)


@pytest.mark.parametrize("space", [" ", "\t", "\u3000"])
def test_chat_counts_a_megabyte_of_whitespace_before_a_word(fresh_sim: Any, space: str) -> None:
    framing = _chat_prompt(fresh_sim, "x").json()["usage"]["prompt_tokens"] - 1
    reply = _chat_prompt(fresh_sim, space * RUN + "x")
    assert reply.status_code == 200, reply.text
    expected = framing + _spaces_then_word("o200k_base", space)
    assert reply.json()["usage"]["prompt_tokens"] == expected


def test_gemini_counts_a_megabyte_of_spaces_before_a_word(fresh_sim: Any) -> None:
    def count(text: str) -> httpx.Response:
        body = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
        path = "/v1beta/models/gemini-sim:countTokens"
        return httpx.post(fresh_sim.url(path), json=body, timeout=120)

    framing = count("x").json()["totalTokens"] - 1
    reply = count(" " * RUN + "x")
    assert reply.status_code == 200, reply.text
    assert reply.json()["totalTokens"] == framing + _spaces_then_word("cl100k_base", " ")


def _sim_count(sim: Any, model: str, content: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": content}]}
    reply = httpx.post(sim.url("/sim/count"), json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    return int(reply.json()["prompt_tokens"])


SCHEMA = {
    "type": "object",
    "properties": {k: {"type": "integer" if k.startswith("n") else "string"} for k in "abn1n2"},
}


@pytest.mark.parametrize("model", ["mystery-2", "mystery-3"])
@pytest.mark.parametrize("shape", ["text", "json", "call"])
def test_an_answers_tokens_are_what_its_model_counts_for_it(
    fresh_sim: Any, model: str, shape: str
) -> None:
    """A model whose tokenizer routefit does not know (rates per kind of text) reports for its
    answer what it counts for the same text in a prompt: the answer comes back next turn."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": f"Tell me more ({shape})."}],
    }
    if shape == "json":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "r", "schema": SCHEMA},
        }
    if shape == "call":
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]
        body["tool_choice"] = "required"
    reply = httpx.post(fresh_sim.url("/v1/chat/completions"), json=body, timeout=30).json()
    message = reply["choices"][0]["message"]
    if shape == "call":
        said = [message["tool_calls"][0]["function"]["arguments"], "f"]
    else:
        said = [message["content"]]
    empty = _sim_count(fresh_sim, model, "")
    counted = sum(_sim_count(fresh_sim, model, text) - empty for text in said)
    scaffolding = int(fresh_sim.state.model(model).per_tool_call) if shape == "call" else 0
    assert reply["usage"]["completion_tokens"] == counted + scaffolding


@pytest.mark.parametrize(("cap", "status"), [(15, 400), (16, 200)])
def test_responses_refuses_an_output_cap_below_sixteen(
    fresh_sim: Any, cap: int, status: int
) -> None:
    """OpenAI's Responses API takes ``max_output_tokens`` of 16 or more ("integer below minimum
    value. Expected a value >= 16"); a gateway that shrinks a reply's cap below it must see the
    refusal here as it would there."""
    body = {"model": "gpt-4o", "input": "hi", "max_output_tokens": cap}
    reply = httpx.post(fresh_sim.url("/v1/responses"), json=body, timeout=30)
    assert reply.status_code == status, reply.text
    if status == 400:
        error = reply.json()["error"]
        assert (error["param"], error["code"]) == ("max_output_tokens", "integer_below_min_value")


def test_responses_overflow_states_no_count_as_openai_does(fresh_sim: Any) -> None:
    """OpenAI's Responses API refuses an overflow without saying how many tokens it counted:
    a gateway that learnt the provider's count from this refusal would learn it only here."""
    window = fresh_sim.state.model("gpt-4o-mini").context_window
    words = "river cloud tower field " * (window // 4 + 1)  # over the window whatever the count
    body = {"model": "gpt-4o-mini", "input": words}
    reply = httpx.post(fresh_sim.url("/v1/responses"), json=body, timeout=60)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["param"], error["code"]) == ("input", "context_length_exceeded")
    assert error["message"] == (
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again."
    )
