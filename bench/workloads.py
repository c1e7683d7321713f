"""Request bodies and deterministic synthetic text shared by the benchmark sections."""

from __future__ import annotations

import base64
import io
import json
import random

# Common English words: realistic token density for the o200k / cl100k / DeepSeek tokenizers.
_VOCABULARY = (
    "the of and to in is that for it as with was on be by this are or from at an which have "
    "not but can all their more has one were will there been about other when these if would "
    "some into only time also use could than first over such its new after any most these "
    "where each between system value function request response model token budget context "
    "window message error result data file table index query cache server client route price "
    "image user agent tool call output input stream batch limit window retry backoff latency "
    "throughput memory process thread worker queue event handler config policy report sample "
    "anchor estimate"
)
WORDS = _VOCABULARY.split()


def text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    words = rng.choices(WORDS, k=n_words)
    out = []
    for i in range(0, len(words), 12):
        out.append(" ".join(words[i : i + 12]).capitalize() + ".")
    return " ".join(out)


def text_tokens(tokens: int, seed: int) -> str:
    """About ``tokens`` o200k tokens of prose (≈ 1.08 tokens per word for this vocabulary)."""
    return text(int(tokens / 1.08), seed)


def png_data_url(width: int, height: int, seed: int = 0) -> str:
    from PIL import Image

    rng = random.Random(seed)
    color = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


# -- load-test bodies (``@@NONCE@@`` is replaced per request by the load generator) -----------

SMALL_PROMPT = "Request @@NONCE@@: summarise the benefits of connection pooling in one sentence."


def openai_small(model: str, stream: bool = False) -> str:
    body: dict[str, object] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": SMALL_PROMPT},
        ],
        "max_tokens": 64,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body)


def openai_long(model: str, tokens: int = 30_000) -> str:
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Document @@NONCE@@:\n" + text_tokens(tokens, 30)},
            {"role": "assistant", "content": "I have read the document."},
            {"role": "user", "content": "Summarise it in one sentence."},
        ],
        "max_tokens": 64,
    }
    return json.dumps(body)


def openai_session(model: str, steps: int = 200) -> str:
    """A long agent session's next request: ``steps`` tool calls and their outputs (~150 words
    each, ~40k tokens at 200 steps, under gpt-4o's window: forwarded uncut), the same in
    every request, then the new user turn carrying the nonce — what an agent sends every turn,
    all of it seen before but the end."""
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent. Use the tools."},
        {"role": "user", "content": "Find and fix the failing test."},
    ]
    for i in range(steps):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": text(150, i)})
    messages.append({"role": "user", "content": "Step @@NONCE@@: what next?"})
    body = {"model": model, "messages": messages, "max_tokens": 64}
    return json.dumps(body)


def json_output(size: int, seed: int) -> str:
    """A tool's JSON output of about ``size`` characters: indented records, every quote and
    newline an escape in the request's JSON (what a gateway writes out again at a cost)."""
    rng = random.Random(seed)
    records = []
    n = 0
    while n < size:
        note = " ".join(rng.choices(WORDS, k=6))
        record = json.dumps({"id": len(records), "path": f"src/m{seed}.py", "note": note}, indent=2)
        records.append(record)
        n += len(record) + 2
    return "[" + ",\n".join(records) + "]"


def openai_tool_session(model: str, steps: int = 16, size: int = 20_000) -> str:
    """An agent session's next request whose tool outputs are big JSON (``steps`` of ``size``
    characters, ~104k tokens at 16 steps of 20 KB: under gpt-4o's window), the same in every
    request, then the new user turn carrying the nonce."""
    messages: list[dict[str, object]] = [{"role": "user", "content": "List what changed."}]
    for i in range(steps):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "list_changes", "arguments": json.dumps({"page": i})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{i}", "content": json_output(size, i)}
        )
    messages.append({"role": "user", "content": "Step @@NONCE@@: what next?"})
    return json.dumps({"model": model, "messages": messages, "max_tokens": 64})


def responses_small(model: str, stream: bool = False, store: bool | None = None) -> str:
    """``store`` absent means the API's default (true: the response is kept)."""
    body: dict[str, object] = {
        "model": model,
        "instructions": "You are a concise assistant.",
        "input": SMALL_PROMPT,
        "max_output_tokens": 64,
    }
    if store is not None:
        body["store"] = store
    if stream:
        body["stream"] = True
    return json.dumps(body)


def anthropic_small(model: str, stream: bool = False) -> str:
    body: dict[str, object] = {
        "model": model,
        "system": "You are a concise assistant.",
        "messages": [{"role": "user", "content": SMALL_PROMPT}],
        "max_tokens": 64,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body)


def anthropic_session(model: str, steps: int = 200) -> str:
    """``openai_session``'s agent on the Messages wire, as Claude Code sends it: each step an
    assistant ``tool_use`` and a user ``tool_result``, the tools and the system prompt the same
    in every request, the new user turn carrying the nonce."""
    messages: list[dict[str, object]] = [
        {"role": "user", "content": "Find and fix the failing test."}
    ]
    for i in range(steps):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "read_file"}
        call = {**use, "input": {"path": f"src/m{i}.py"}}
        messages.append({"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": text(150, i)}
        messages.append({"role": "user", "content": [result]})
    messages.append({"role": "user", "content": "Step @@NONCE@@: what next?"})
    tool = {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    body = {
        "model": model,
        "system": "You are a coding agent. Use the tools.",
        "tools": [tool],
        "messages": messages,
        "max_tokens": 64,
    }
    return json.dumps(body)
