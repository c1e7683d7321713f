"""PDF documents through routefit, between the real anthropic SDK and the simulator.

A PDF is priced as its pages (each page's text and a picture of it: pricing.documents), not as
its base64; the simulator counts it by its own rule (proxy.sim.documents). What is checked is
what a client sees: a PDF that fits is forwarded and priced at or above the provider's count, an
old one is offloaded whole when the conversation outgrows the window, and whatever the fit
removes is really gone from what the provider receives.
"""

from __future__ import annotations

import json

import anthropic
import pytest
from harness import claude_route, gateway_config
from inprocess import run_inprocess
from media_files import document_block, scanned_pdf, text_pdf

from strategies.mask import MASK_PREFIX

TOOLS = [{"name": "Read", "input_schema": {"type": "object"}}]


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    routes = [
        claude_route("claude", sim.base_url, "claude-sim", supports_vision=True),
        claude_route(
            "claude-small",
            sim.base_url,
            "claude-sim-small",
            max_input_tokens=8192,
            max_output_tokens=4096,
            supports_vision=True,
        ),
    ]
    config = gateway_config(tmp_path_factory.mktemp("gw") / "routefit.yaml", routes)
    with run_inprocess(config) as running:
        yield running


@pytest.fixture
def client(gw):
    return anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)


def _ask(client, model: str, messages: list, **extra):
    return client.messages.with_raw_response.create(
        model=model, max_tokens=256, messages=messages, **extra
    )


def _read_turns(pdf: bytes) -> list[dict]:
    """An agent that read a PDF with a tool a few turns ago, then went on talking."""
    return [
        {"role": "user", "content": "Read report.pdf and tell me what it says."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "r.pdf"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [pdf]}],
        },
        {"role": "assistant", "content": "It is a report of numbered items."},
        {"role": "user", "content": "Thanks. Now say hello."},
    ]


@pytest.mark.parametrize(
    "pdf",
    [text_pdf(12), scanned_pdf(3, side=800)],
    ids=["text", "scanned"],
)
def test_a_pdf_that_fits_is_forwarded_and_priced_from_its_pages(client, fresh_sim, pdf):
    messages = [
        {"role": "user", "content": [document_block(pdf), {"type": "text", "text": "Summarise."}]}
    ]
    raw = _ask(client, "claude", messages)
    reply = raw.parse()
    sent = fresh_sim.last_request("/v1/messages")["body"]
    assert sent["messages"] == messages  # the document went as the client sent it
    assert raw.headers["x-routefit-actions"] == "none"
    estimate = int(raw.headers["x-routefit-prompt-tokens"])
    used = reply.usage.input_tokens
    # Never under the provider's count; over it by the pictures' worst case, not by base64
    # (priced as base64, the scanned file is hundreds of thousands of tokens: refused).
    assert used <= estimate <= 2 * used + 200


def test_an_old_pdf_goes_whole_when_the_conversation_outgrows_the_window(client, fresh_sim):
    pdf = document_block(text_pdf(20))
    raw = _ask(client, "claude-small", _read_turns(pdf), tools=TOOLS)
    assert raw.http_response.status_code == 200
    sent = fresh_sim.last_request("/v1/messages")["body"]
    result = sent["messages"][2]["content"][0]
    assert result["type"] == "tool_result"
    assert pdf["source"]["data"][:64] not in json.dumps(sent)
    (placeholder,) = result["content"]  # masked (or offloaded): one short text, never a cut PDF
    assert placeholder["text"].startswith((MASK_PREFIX, "[document omitted: application/pdf"))
    assert int(raw.headers["x-routefit-prompt-tokens"]) >= raw.parse().usage.input_tokens


def test_a_block_priced_as_its_json_is_sent_as_the_fit_cut_it(client, fresh_sim):
    """A text document is priced as its JSON (the stated fallback). Cut or masked to fit, it
    must be sent as the text it was priced as, not whole (which would overflow the window)."""
    words = " ".join(f"line {i} of the notes" for i in range(4000))
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": words},
    }
    raw = _ask(client, "claude-small", _read_turns(document), tools=TOOLS)
    assert raw.http_response.status_code == 200
    sent = fresh_sim.last_request("/v1/messages")["body"]
    result = sent["messages"][2]["content"][0]
    assert words not in json.dumps(result)
    (text,) = result["content"]
    assert text["type"] == "text"
    assert text["text"].startswith((MASK_PREFIX, '{"source":{"data":"line 0 of the notes'))
    assert int(raw.headers["x-routefit-prompt-tokens"]) >= raw.parse().usage.input_tokens


def test_a_latest_pdf_the_window_cannot_hold_is_refused_before_the_provider(client, fresh_sim):
    messages = [
        {
            "role": "user",
            "content": [document_block(text_pdf(20)), {"type": "text", "text": "Summarise."}],
        }
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        _ask(client, "claude-small", messages)
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "prompt is too long" in caught.value.message  # Anthropic's words for it
    assert not fresh_sim.state.requests(path="/v1/messages")


def test_an_unreadable_pdf_is_priced_as_its_base64_and_the_provider_answers(client, fresh_sim):
    broken = {
        "type": "document",
        "source": {
            "type": "base64",
            "media_type": "application/pdf",
            "data": "JVBERi0xLjQKbm9wZQ==",
        },
    }
    with pytest.raises(anthropic.BadRequestError) as caught:
        _ask(client, "claude", [{"role": "user", "content": [broken]}])
    assert "PDF" in caught.value.message  # the provider's own refusal, relayed
