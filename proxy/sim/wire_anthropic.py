"""``POST /v1/messages``: Anthropic's Messages API, its validation, prompt caching and SSE."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response

from proxy.sim.completion import Answer, answer
from proxy.sim.counting import READ_AS_JSON, SERVER_BLOCKS, Prompt, anthropic_prompt
from proxy.sim.documents import pdf_pages
from proxy.sim.errors import SimError
from proxy.sim.images import ImageProblem, Picture, decode_base64, probe_bytes, resolve_url
from proxy.sim.models import SimModel
from proxy.sim.state import SimState
from proxy.sim.streaming import CutBody, EventStream, sse
from proxy.sim.tokens import digest

if TYPE_CHECKING:
    from proxy.sim.ctx import Ctx

__all__ = ["messages"]

KNOWN_PARAMS = frozenset(
    {
        "model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream",
        "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking", "service_tier",
        "container", "mcp_servers", "context_management", "output_config", "output_format",
        "inference_geo", "cache_control",
    }
)  # fmt: skip
BLOCK_TYPES = (
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    *sorted(READ_AS_JSON - SERVER_BLOCKS),
    *sorted(SERVER_BLOCKS),
)
#: What a tool_result's content may hold.
RESULT_TYPES = ("text", "image", "document", "search_result")
DOCUMENT_SOURCES = ("base64", "text", "url", "content", "file")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
MAX_BREAKPOINTS = 4


def _bad(message: str) -> SimError:
    return SimError(400, message, "invalid_request_error")


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def _validate_block(block: Any, where: str, role: str) -> None:
    if not isinstance(block, Mapping):
        raise _bad(f"{where}: Input should be a valid dictionary or object to extract fields from")
    kind = block.get("type")
    if kind not in BLOCK_TYPES:
        tags = ", ".join(f"'{t}'" for t in BLOCK_TYPES)
        raise _bad(
            f"{where}: Input tag '{kind}' found using 'type' does not match any of the expected "
            f"tags: {tags}"
        )
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise _bad(f"{where}.text: Field required")
        if not block["text"]:
            raise _bad("messages: text content blocks must be non-empty")
    elif kind == "image":
        source = block.get("source")
        if not isinstance(source, Mapping) or source.get("type") not in ("base64", "url"):
            raise _bad(
                f"{where}.source: Input tag does not match any of the expected tags: "
                "'base64', 'url'"
            )
        if source["type"] == "base64":
            if source.get("media_type") not in (
                "image/jpeg",
                "image/png",
                "image/gif",
                "image/webp",
            ):
                raise _bad(
                    f"{where}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', "
                    "'image/gif' or 'image/webp'"
                )
            if not isinstance(source.get("data"), str):
                raise _bad(f"{where}.source.base64.data: Field required")
        elif not isinstance(source.get("url"), str):
            raise _bad(f"{where}.source.url.url: Field required")
    elif kind == "document":
        _validate_document(block, where)
    elif kind == "search_result":
        for key in ("source", "title"):
            if not isinstance(block.get(key), str):
                raise _bad(f"{where}.{key}: Field required")
        content = block.get("content")
        if not isinstance(content, list) or not all(
            isinstance(b, Mapping) and b.get("type") == "text" for b in content
        ):
            raise _bad(f"{where}.content: search_result content must be text blocks")
    elif kind in SERVER_BLOCKS and role != "assistant":
        raise _bad(f"{where}: {kind} blocks are only allowed in assistant messages")
    elif kind == "tool_use":
        if role != "assistant":
            raise _bad(f"{where}: tool_use blocks are only allowed in assistant messages")
        for key in ("id", "name", "input"):
            if key not in block:
                raise _bad(f"{where}.{key}: Field required")
        for key in ("id", "name"):
            if not isinstance(block[key], str):
                raise _bad(f"{where}.{key}: Input should be a valid string")
        if not isinstance(block["input"], Mapping):
            raise _bad(f"{where}.input: Input should be a valid dictionary")
    elif kind == "tool_result":
        if role != "user":
            raise _bad(f"{where}: tool_result blocks are only allowed in user messages")
        if not isinstance(block.get("tool_use_id"), str):
            raise _bad(f"{where}.tool_use_id: Field required")
        inner = block.get("content")
        if inner is not None and not isinstance(inner, str):
            if not isinstance(inner, list):
                raise _bad(f"{where}.content: Input should be a valid list")
            for k, sub in enumerate(inner):
                if not isinstance(sub, Mapping) or sub.get("type") not in RESULT_TYPES:
                    raise _bad(
                        f"{where}.content.{k}: tool_result content must be text, image, "
                        "document or search_result blocks"
                    )
                _validate_block(sub, f"{where}.content.{k}", "user")


def _validate_document(block: Mapping[str, Any], where: str) -> None:
    source = block.get("source")
    if not isinstance(source, Mapping) or source.get("type") not in DOCUMENT_SOURCES:
        tags = ", ".join(f"'{t}'" for t in DOCUMENT_SOURCES)
        raise _bad(f"{where}.source: Input tag does not match any of the expected tags: {tags}")
    if source["type"] == "base64":
        if source.get("media_type") != "application/pdf":
            raise _bad(f"{where}.source.base64.media_type: Input should be 'application/pdf'")
        data = source.get("data")
        if not isinstance(data, str):
            raise _bad(f"{where}.source.base64.data: Field required")
        if pdf_pages(data) is None:
            raise _bad(f"{where}: The PDF specified was not valid.")
    elif source["type"] == "text" and not isinstance(source.get("data"), str):
        raise _bad(f"{where}.source.text.data: Field required")


def _validate_messages(messages: Any) -> None:
    if messages is None:
        raise _bad("messages: Field required")
    if not isinstance(messages, list):
        raise _bad("messages: Input should be a valid list")
    if not messages:
        raise _bad("messages: at least one message is required")
    for i, msg in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(msg, Mapping):
            raise _bad(f"{where}: Input should be a valid dictionary")
        role = msg.get("role")
        if role not in ("user", "assistant", "system"):
            # Claude Code 2.1 sends system entries inside messages; they are accepted (text only)
            raise _bad(f"{where}.role: Input should be 'user', 'assistant' or 'system'")
        content = msg.get("content")
        if not isinstance(content, str | list):
            raise _bad(f"{where}.content: Input should be a valid string or list")
        last_assistant = i == len(messages) - 1 and role == "assistant"
        if not content and not last_assistant:
            raise _bad(
                f"{where}: all messages must have non-empty content except for the optional final "
                "assistant message"
            )
        for j, block in enumerate(_blocks(content)):
            _validate_block(block, f"{where}.content.{j}", role)
    _validate_pairing(messages)


def _validate_pairing(messages: list[Mapping[str, Any]]) -> None:
    previous_uses: set[str] = set()
    for i, msg in enumerate(messages):
        blocks = [b for b in _blocks(msg["content"]) if isinstance(b, Mapping)]
        results = [
            (j, b["tool_use_id"]) for j, b in enumerate(blocks) if b.get("type") == "tool_result"
        ]
        for j, use_id in results:
            if use_id not in previous_uses:
                raise _bad(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {use_id}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        if uses and i + 1 < len(messages):
            following = messages[i + 1]
            answered = {
                b.get("tool_use_id")
                for b in _blocks(following.get("content"))
                if isinstance(b, Mapping) and b.get("type") == "tool_result"
            }
            missing = [u for u in uses if u not in answered]
            if missing:
                raise _bad(
                    f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
        previous_uses = set(uses)


def validate(body: Any, *, strict: bool = True) -> None:
    if not isinstance(body, Mapping):
        raise _bad("Input should be a valid dictionary")
    extra = sorted(set(body) - KNOWN_PARAMS)
    if extra and strict:
        raise _bad(f"{extra[0]}: Extra inputs are not permitted")
    if not isinstance(body.get("model"), str):
        raise _bad("model: Field required")
    if "max_tokens" not in body:
        raise _bad("max_tokens: Field required")
    max_tokens = body["max_tokens"]
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise _bad("max_tokens: Input should be a valid integer")
    if max_tokens < 1:
        raise _bad("max_tokens: Input should be greater than or equal to 1")
    _validate_messages(body.get("messages"))
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list):
            raise _bad("system: Input should be a valid string or list")
        for j, block in enumerate(system):
            if not isinstance(block, Mapping) or block.get("type") != "text":
                raise _bad(f"system.{j}: system blocks must be text blocks")
            _validate_block(block, f"system.{j}", "system")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("stream: Input should be a valid boolean")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools: Input should be a valid list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping):
                raise _bad(f"tools.{i}: Input should be a valid dictionary")
            if tool.get("type") not in (None, "custom"):
                continue  # server tools (web search, ...) are accepted as they are
            if not isinstance(tool.get("name"), str) or not _TOOL_NAME.match(tool["name"]):
                raise _bad(
                    f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
                )
            if not isinstance(tool.get("input_schema"), Mapping):
                raise _bad(f"tools.{i}.custom.input_schema: Field required")
        names = [t.get("name") for t in tools]
        if len(names) != len(set(map(str, names))):
            raise _bad("tools: Tool names must be unique.")
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, Mapping) or choice.get("type") not in (
            "auto",
            "any",
            "tool",
            "none",
        ):
            raise _bad(
                "tool_choice: Input tag does not match any of the expected tags: 'auto', "
                "'any', 'tool', 'none'"
            )
        if choice["type"] == "tool" and not isinstance(choice.get("name"), str):
            raise _bad("tool_choice.tool.name: Field required")
    _check_thinking(body.get("thinking"))
    _check_breakpoints(body)


#: The least ``thinking.budget_tokens`` Anthropic takes.
MIN_THINKING_BUDGET = 1024


def _check_thinking(thinking: Any) -> None:
    """Extended thinking's budget: an integer of at least 1024 (that it stays under
    ``max_tokens`` is checked with the model, ``_messages_model``)."""
    if thinking is None:
        return
    if not isinstance(thinking, Mapping):
        raise _bad("thinking: Input should be a valid dictionary or object to extract fields from")
    if thinking.get("type") != "enabled":
        return
    if "budget_tokens" not in thinking:
        raise _bad("thinking.enabled.budget_tokens: Field required")
    budget = thinking["budget_tokens"]
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise _bad("thinking.enabled.budget_tokens: Input should be a valid integer")
    if budget < MIN_THINKING_BUDGET:
        raise _bad(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to "
            f"{MIN_THINKING_BUDGET}"
        )


def _marked(body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, cache_control) of every marked block, in the order Anthropic processes them:
    ``tools``, ``system``, then ``messages`` (a tool_result's own blocks after it); the
    request's own ``cache_control`` (automatic caching) last, as it marks the last block."""
    found: list[tuple[str, Any]] = []
    for i, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, Mapping):
            found.append((f"tools.{i}", tool.get("cache_control")))
    system = body.get("system")
    for j, block in enumerate(system if isinstance(system, list) else []):
        found.append((f"system.{j}", block.get("cache_control")))
    for i, msg in enumerate(body["messages"]):
        for j, block in enumerate(_blocks(msg["content"])):
            where = f"messages.{i}.content.{j}"
            found.append((where, block.get("cache_control")))
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                for k, b in enumerate(block["content"]):
                    found.append((f"{where}.content.{k}", b.get("cache_control")))
    found.append(("cache_control", body.get("cache_control")))
    return [(where, mark) for where, mark in found if mark]


def _check_breakpoints(body: Mapping[str, Any]) -> None:
    """At most 4, the request's own ``cache_control`` (automatic caching) among them; each an
    ephemeral one of 5 minutes (no ``ttl``, or "5m") or an hour ("1h"), and no 1-hour one
    after a 5-minute one (Anthropic: longer TTLs must come before shorter ones)."""
    marked = _marked(body)
    five = None  # where the first 5-minute breakpoint is
    for where, mark in marked:
        at = f"{where}.cache_control" if where != "cache_control" else where
        if not isinstance(mark, Mapping):
            raise _bad(f"{at}: Input should be a valid dictionary or object to extract fields from")
        if mark.get("type") != "ephemeral":
            raise _bad(
                f"{at}: Input tag '{mark.get('type')}' found using 'type' does not match any of "
                "the expected tags: 'ephemeral'"
            )
        ttl = "5m" if mark.get("ttl") is None else mark["ttl"]
        if ttl not in ("5m", "1h"):
            raise _bad(f"{at}.ephemeral.ttl: Input should be '5m' or '1h'")
        if ttl == "5m" and five is None:
            five = where
        if ttl == "1h" and five is not None:
            raise _bad(
                f"{at}.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' "
                "cache_control block. Note that blocks are processed in the following order: "
                "`tools`, `system`, `messages`."
            )
    if len(marked) > MAX_BREAKPOINTS:
        raise _bad(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(marked)}."
        )


async def collect_pictures(
    state: SimState, body: Mapping[str, Any], model: SimModel
) -> dict[str, Picture]:
    """Every image of the request, resolved (SimError when the provider would refuse one)."""
    out: dict[str, Picture] = {}
    config = state.config

    async def visit(block: Mapping[str, Any], where: str) -> None:
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            for k, sub in enumerate(block["content"]):
                await visit(sub, f"{where}.content.{k}")
        if block.get("type") != "image":
            return
        if model.image_rule is None:
            raise _bad(f"{where}: this model does not support image input")
        source = block["source"]
        key = image_key(block)
        if key in out:
            return
        try:
            if source["type"] == "base64":
                data = decode_base64(source["data"])
                width, height, actual = probe_bytes(data)
                if actual != source["media_type"]:
                    raise _bad(
                        f"{where}.image.source.base64.data: Image does not match the provided "
                        f"media type {source['media_type']}"
                    )
                out[key] = Picture(width, height, actual, digest(data))
            else:
                out[key] = await resolve_url(
                    source["url"],
                    assumed=config.assumed_image_size,
                    fetch_loopback=config.fetch_loopback_images,
                )
        except ImageProblem as exc:
            raise _bad(f"{where}.image.source: Could not process image ({exc})") from None

    for i, msg in enumerate(body["messages"]):
        for j, block in enumerate(_blocks(msg["content"])):
            await visit(block, f"messages.{i}.content.{j}")
    return out


def image_key(block: Mapping[str, Any]) -> str:
    source = block["source"]
    return source.get("data") or source.get("url") or ""


def _usage(input_tokens: int, read: int, creation: int, output: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": read,
        "cache_creation": {"ephemeral_5m_input_tokens": creation, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output,
        "service_tier": "standard",
    }


def _content(ans: Answer) -> list[dict[str, Any]]:
    if ans.tool_calls:
        return [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)}
            for c in ans.tool_calls
        ]
    return [{"type": "text", "text": ans.text}]


_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _stream_events(
    message: dict[str, Any], ans: Answer, usage: dict[str, Any] | None
) -> list[bytes]:
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    if usage is not None:
        start["usage"] = {**usage, "output_tokens": 1}
    else:
        start.pop("usage", None)
    events = [sse(_dump({"type": "message_start", "message": start}), "message_start")]
    for index, block in enumerate(_content(ans)):
        if block["type"] == "text":
            head: dict[str, Any] = {"type": "text", "text": ""}
            pieces: list[dict[str, Any]] = [
                {"type": "text_delta", "text": w} for w in re.findall(r"\s*\S+", block["text"])
            ]
        else:
            head = {**block, "input": {}}
            args = _dump(block["input"])
            step = max(1, len(args) // 3 + 1)
            pieces = [
                {"type": "input_json_delta", "partial_json": args[s : s + step]}
                for s in range(0, len(args), step)
            ]
        events.append(
            sse(
                _dump({"type": "content_block_start", "index": index, "content_block": head}),
                "content_block_start",
            )
        )
        if index == 0:
            events.append(sse(_dump({"type": "ping"}), "ping"))
        for delta in pieces:
            events.append(
                sse(
                    _dump({"type": "content_block_delta", "index": index, "delta": delta}),
                    "content_block_delta",
                )
            )
        events.append(
            sse(_dump({"type": "content_block_stop", "index": index}), "content_block_stop")
        )
    final: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
    }
    if usage is not None:
        final["usage"] = {"output_tokens": usage["output_tokens"]}
    events.append(sse(_dump(final), "message_delta"))
    events.append(sse(_dump({"type": "message_stop"}), "message_stop"))
    return events


def _messages_model(state: SimState, body: Any) -> SimModel:
    """The Anthropic model a valid request names; an unknown model is a 404 before any
    validation, as at Anthropic."""
    if isinstance(body, Mapping) and isinstance(body.get("model"), str):
        model = state.model(body["model"])
        if model is None or model.wire != "anthropic":
            raise SimError(404, f"model: {body['model']}", "not_found_error")
    validate(body, strict=state.config.strict_params)
    name = body["model"]
    model = state.model(name)
    assert model is not None
    max_tokens = body["max_tokens"]
    if max_tokens > model.max_output:
        raise _bad(
            f"max_tokens: {max_tokens} > {model.max_output}, which is the maximum allowed "
            f"number of output tokens for {name}"
        )
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int) and budget >= max_tokens:  # the reply's cap includes it
            raise _bad("`max_tokens` must be greater than `thinking.budget_tokens`")
    return model


async def _count_and_cache(
    ctx: Ctx, body: Mapping[str, Any], model: SimModel
) -> tuple[Prompt, int, int]:
    """(the prompt, its tokens read from the cache, its tokens written to it): counted, checked
    against the context window, then looked up and stored at its cache breakpoints."""
    pictures = await collect_pictures(ctx.state, body, model)
    prompt = anthropic_prompt(body, model, lambda block: pictures[image_key(block)])
    window = model.context_window
    max_tokens = body["max_tokens"]
    if prompt.total > window:
        raise _bad(f"prompt is too long: {prompt.total} tokens > {window} maximum")
    if prompt.total + max_tokens > window:
        raise _bad(
            f"input length and `max_tokens` exceed context limit: {prompt.total} + {max_tokens} > "
            f"{window}, decrease input length or `max_tokens` and try again"
        )
    read, creation = ctx.state.breakpoint_caches[model.name].lookup_and_store(
        prompt.tokens, prompt.breakpoints, prompt.block_ends
    )
    ctx.entry["prompt_tokens"] = prompt.total
    ctx.entry["cached_tokens"] = read
    return prompt, read, creation


def _answer(body: Mapping[str, Any], model: SimModel, prompt_total: int) -> Answer:
    """The reply to the last message: a tool call is wanted only after a user's own words,
    not after a tool result."""
    last = body["messages"][-1]
    last_text = " ".join(
        b["text"]
        for b in _blocks(last["content"])
        if isinstance(b, Mapping) and b.get("type") == "text"
    )
    wants_call = last["role"] == "user" and not any(
        isinstance(b, Mapping) and b.get("type") == "tool_result" for b in _blocks(last["content"])
    )
    choice = body.get("tool_choice") or {}
    forced = {"any": "*", "tool": choice.get("name")}.get(choice.get("type", "auto"))
    offered = [
        (t["name"], t.get("input_schema") or {})
        for t in body.get("tools") or []
        if isinstance(t, Mapping) and isinstance(t.get("name"), str)
    ]
    return answer(
        model,
        last_user=last_text,
        tools=[] if choice.get("type") == "none" else offered,
        forced=forced,
        wants_call=wants_call,
        max_tokens=body["max_tokens"],
        room=model.context_window - prompt_total,
        id_prefix="toolu_",
    )


def _reply(ctx: Ctx, message: dict[str, Any], ans: Answer, headers: dict[str, str]) -> Response:
    """The message as JSON or SSE, bent by the request's faults: no usage, a torn event or
    truncated JSON, a cut."""
    plan = ctx.plan
    if ctx.body.get("stream"):
        events = _stream_events(message, ans, None if plan.no_usage else message["usage"])
        if plan.malformed:
            events.insert(
                1, b'event: content_block_start\ndata: {"type": "content_block_start", "index\n\n'
            )
        return EventStream(
            ctx.state, events, delay=ctx.chunk_delay, cut_after=plan.cut_after, headers=headers
        )
    if plan.no_usage:
        message.pop("usage")
    if plan.malformed:
        return Response(
            _dump(message)[:-7].encode(), 200, headers=headers, media_type="application/json"
        )
    if plan.cut_after is not None:
        return CutBody(_dump(message).encode())
    return JSONResponse(message, headers=headers)


async def messages(ctx: Ctx) -> Response:
    body = ctx.body
    model = _messages_model(ctx.state, body)
    prompt, read, creation = await _count_and_cache(ctx, body, model)
    ans = _answer(body, model, prompt.total)
    usage = _usage(prompt.total - read - creation, read, creation, ans.completion_tokens)
    if ctx.plan.lie is not None:
        usage["input_tokens"] = ctx.plan.lie
    message: dict[str, Any] = {
        "id": f"msg_sim{ctx.number:06d}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": _content(ans),
        "stop_reason": _STOP[ans.finish],
        "stop_sequence": None,
        "usage": usage,
    }
    headers = {"request-id": ctx.request_id, "x-sim-prompt-tokens": str(prompt.total)}
    return _reply(ctx, message, ans, headers)
