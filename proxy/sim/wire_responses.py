"""``POST /v1/responses``: OpenAI's Responses API, counted by the simulator's own rules.

The simulator renders the input items into the chat messages its OpenAI models count
(``counting.openai_prompt``): a message item is a message; a run of ``function_call`` /
``custom_tool_call`` items is one assistant message with tool calls; an output item is a tool
message; a reasoning item costs its summary text (earlier turns' encrypted reasoning is not
context, as at OpenAI); any other item costs its compact JSON as assistant text. Function tools
follow the function-schema rule; other tools (custom with their grammar, web_search, ...) cost
their compact JSON as text. ``instructions`` is a system message; a ``text.format`` JSON schema
costs what chat's ``response_format`` does. An ``input_image`` is the chat wire's image
(resolved and priced by the model's image rule, refused as OpenAI refuses it).

Refused like OpenAI: an output whose ``call_id`` answers no call before it, a call left without
its output, a message content part of a type OpenAI does not define (400 ``invalid_value``
naming the part), a reasoning item without its ``summary`` (an array of ``summary_text`` parts),
an overflow (400 ``context_length_exceeded``; a streamed request gets it as OpenAI streams it:
200, the stream's opening, an ``error`` event and ``response.failed``). Streams send the whole
event sequence, ending in ``response.completed`` with usage
(``input_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response

from proxy.sim.completion import Answer, answer
from proxy.sim.counting import openai_prompt
from proxy.sim.errors import SimError
from proxy.sim.streaming import EventStream, sse
from proxy.sim.wire_openai import bad_type, bad_value, collect_pictures, missing_param

if TYPE_CHECKING:
    from proxy.sim.ctx import Ctx

__all__ = ["responses", "to_chat"]

ITEM_TYPES = frozenset(
    {
        "message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
        "custom_tool_call_output", "web_search_call", "local_shell_call",
        "local_shell_call_output", "item_reference", "compaction",
    }
)  # fmt: skip
_CALLS = ("function_call", "custom_tool_call")
#: OpenAI's words for a Responses overflow: no count (a gateway has none to learn from it).
OVERFLOW = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
#: The Responses API's least ``max_output_tokens``: OpenAI refuses less with 400
#: ``integer_below_min_value`` (chat's ``max_tokens`` takes any positive cap).
LEAST_OUTPUT = 16
#: The content part types a message item may carry (OpenAI's input and output content types):
#: any other is refused, as OpenAI refuses it, not priced as text a provider never reads.
PART_TYPES = (
    "input_text", "input_image", "input_file", "input_audio", "output_text", "refusal",
    "summary_text", "reasoning_text", "computer_screenshot",
)  # fmt: skip


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, Mapping)
    )


def _user_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for p in content if isinstance(content, list) else []:
        if not isinstance(p, Mapping):
            continue
        if p.get("type") == "input_image":
            url = p.get("image_url") or f"file:{p.get('file_id')}"
            detail = p.get("detail") or "auto"
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": detail}})
        elif p.get("type") == "input_file" and "file_data" in p:
            file = {"file_data": p["file_data"], "filename": p.get("filename") or "file.pdf"}
            parts.append({"type": "file", "file": file})
        else:
            parts.append({"type": "text", "text": str(p.get("text") or _dump(p))})
    return parts


def _check_parts(content: Any, where: str) -> None:
    for j, part in enumerate(content if isinstance(content, list) else []):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in PART_TYPES:
            raise bad_value(f"{where}[{j}].type", kind, PART_TYPES)


def _summary(item: Mapping[str, Any], where: str) -> str:
    """The text of a reasoning item's ``summary``, which OpenAI requires: an array (empty for a
    reasoning item that had none) of ``summary_text`` parts, each with its string ``text``."""
    summary = item.get("summary")
    if summary is None:
        raise missing_param(f"{where}.summary")
    if not isinstance(summary, list):
        raise bad_type(f"{where}.summary", "an array", summary)
    texts = []
    for k, part in enumerate(summary):
        at = f"{where}.summary[{k}]"
        if not isinstance(part, Mapping):
            raise bad_type(at, "an object", part)
        if part.get("type") != "summary_text":
            raise bad_value(f"{at}.type", part.get("type"), ("summary_text",))
        if "text" not in part:
            raise missing_param(f"{at}.text")
        if not isinstance(part["text"], str):
            raise bad_type(f"{at}.text", "a string", part["text"])
        texts.append(part["text"])
    return "".join(texts)


def _bad(param: str, message: str) -> SimError:
    return SimError(400, message, param=param, code="invalid_value")


def to_chat(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(chat messages, chat tools) the model counts for a Responses body; SimError when invalid."""
    raw = body.get("input")
    items: list[Any] = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw or []
    if not isinstance(items, list) or not items:
        raise _bad("input", "Invalid 'input': expected a string or a non-empty array.")
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    open_calls: dict[str, int] = {}
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise _bad(f"input[{i}]", f"Invalid 'input[{i}]': expected an object.")
        kind = item.get("type") or ("message" if "role" in item else None)
        if not isinstance(kind, str) or kind not in ITEM_TYPES:
            raise _bad(f"input[{i}].type", f"Invalid value: '{kind}' for 'input[{i}].type'.")
        last = messages[-1] if messages else None
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise _bad(f"input[{i}].role", f"Invalid value: '{role}'.")
            content = item.get("content")
            _check_parts(content, f"input[{i}].content")
            if role == "assistant":
                messages.append({"role": "assistant", "content": _text_of(content)})
            else:
                messages.append({"role": role, "content": _user_content(content)})
        elif kind in _CALLS:
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise _bad(f"input[{i}].call_id", "Missing required parameter: 'call_id'.")
            args = item.get("arguments") if kind == "function_call" else item.get("input")
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": str(item.get("name")), "arguments": str(args or "")},
            }
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            open_calls[call_id] = i
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if call_id is None:
                raise missing_param(f"input[{i}].call_id")
            if not isinstance(call_id, str):
                raise bad_type(f"input[{i}].call_id", "a string", call_id)
            if call_id not in open_calls:
                raise _bad(
                    f"input[{i}]",
                    f"No tool call found for function call output with call_id {call_id}.",
                )
            del open_calls[call_id]
            output = item.get("output")
            text = output if isinstance(output, str) else _dump(output)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "reasoning":
            summary = _summary(item, f"input[{i}]")
            if summary:
                messages.append({"role": "assistant", "content": summary})
        else:
            messages.append({"role": "assistant", "content": _dump(item)})
    if open_calls:
        first = min(open_calls.values())
        raise _bad(f"input[{first}]", f"No tool output found for function call {items[first]}.")
    return messages, _tools(body)


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(tool: Any, where: str) -> None:
        if not isinstance(tool, Mapping):
            raise bad_type(where, "an object", tool)
        if tool.get("type") == "function":
            fn = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
            out.append({"type": "function", "function": fn})
        elif tool.get("type") == "namespace":
            inner = tool.get("tools")
            if inner is not None and not isinstance(inner, list):
                raise bad_type(f"{where}.tools", "an array", inner)
            for k, one in enumerate(inner or []):
                add(one, f"{where}.tools[{k}]")
        else:
            out.append({"type": "text", "text": _dump(tool)})

    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_type("tools", "an array", tools)
    for i, tool in enumerate(tools or []):
        add(tool, f"tools[{i}]")
    return out


def _chat_body(body: Mapping[str, Any]) -> dict[str, Any]:
    messages, tools = to_chat(body)
    extra = [t["text"] for t in tools if t["type"] == "text"]
    if extra:  # non-function tools: their JSON as one system text, first
        messages.insert(0, {"role": "system", "content": "\n".join(extra)})
    chat: dict[str, Any] = {
        "messages": messages,
        "tools": [t for t in tools if t["type"] == "function"],
    }
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":  # counted as chat's is
        schema = {k: v for k, v in fmt.items() if k != "type"}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    return chat


def _output(ans: Answer, rid: str, custom: set[str]) -> list[dict[str, Any]]:
    if not ans.tool_calls:
        part = {"type": "output_text", "text": ans.text, "annotations": []}
        return [
            {
                "type": "message",
                "id": "msg_" + rid[5:],
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        ]
    out = []
    for c in ans.tool_calls:
        if c.name in custom:
            out.append(
                {
                    "type": "custom_tool_call",
                    "id": "ctc_" + c.id,
                    "call_id": c.id,
                    "name": c.name,
                    "input": c.arguments,
                    "status": "completed",
                }
            )
        else:
            out.append(
                {
                    "type": "function_call",
                    "id": "fc_" + c.id,
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": c.arguments,
                    "status": "completed",
                }
            )
    return out


def _numbered() -> Callable[..., bytes]:
    """An SSE event writer that numbers its events from 0 (``sequence_number``), as OpenAI
    numbers a Responses stream's events."""
    seq = 0

    def ev(kind: str, **data: Any) -> bytes:
        nonlocal seq
        seq += 1
        return sse(_dump({"type": kind, "sequence_number": seq - 1, **data}), kind)

    return ev


def _opening(ev: Callable[..., bytes], response: dict[str, Any]) -> list[bytes]:
    """``response.created`` and ``response.in_progress``: what every stream opens with, before
    the model has read the input (so before it can know the input overflows)."""
    shell = {**response, "status": "in_progress", "output": [], "usage": None}
    return [ev("response.created", response=shell), ev("response.in_progress", response=shell)]


def _events(response: dict[str, Any]) -> list[bytes]:
    ev = _numbered()
    events = _opening(ev, response)
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            empty = {**item, "status": "in_progress", "content": []}
            events.append(ev("response.output_item.added", output_index=index, item=empty))
            at = {"item_id": item["id"], "output_index": index, "content_index": 0}
            blank = {"type": "output_text", "text": "", "annotations": []}
            events.append(ev("response.content_part.added", part=blank, **at))
            for word in re.findall(r"\s*\S+", text):
                events.append(ev("response.output_text.delta", delta=word, **at))
            events.append(ev("response.output_text.done", text=text, **at))
            events.append(ev("response.content_part.done", part=item["content"][0], **at))
        else:
            key = "arguments" if item["type"] == "function_call" else "input"
            pending = {**item, key: "", "status": "in_progress"}
            events.append(ev("response.output_item.added", output_index=index, item=pending))
            if item["type"] == "function_call":
                at = {"item_id": item["id"], "output_index": index}
                events.append(ev("response.function_call_arguments.delta", delta=item[key], **at))
                events.append(
                    ev("response.function_call_arguments.done", arguments=item[key], **at)
                )
        events.append(ev("response.output_item.done", output_index=index, item=item))
    end = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    events.append(ev(end, response=response))
    return events


def _failed_stream(ctx: Ctx, body: Mapping[str, Any], name: str) -> Response:
    """A streamed request over the window, as OpenAI answers it: HTTP 200, the stream's opening,
    then an ``error`` event and ``response.failed`` (``status: failed``, no usage) with code
    ``context_length_exceeded`` and no count -- not the 400 a request without ``stream`` gets.
    Logged with ``error`` set, as its status (200) says nothing of the refusal."""
    ctx.entry["error"] = "context_length_exceeded"
    shell: dict[str, Any] = {
        "id": f"resp_sim{ctx.number:06d}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "model": name,
        "output": [],
        "usage": None,
        "store": body.get("store", True),
    }
    ev = _numbered()
    events = _opening(ev, shell)
    error = {"code": "context_length_exceeded", "message": OVERFLOW}
    events.append(ev("error", param="input", **error))
    events.append(ev("response.failed", response={**shell, "status": "failed", "error": error}))
    headers = {"x-request-id": ctx.request_id}
    return EventStream(
        ctx.state, events, delay=ctx.chunk_delay, cut_after=ctx.plan.cut_after, headers=headers
    )


async def responses(ctx: Ctx) -> Response:
    body = ctx.body
    if not isinstance(body, Mapping):
        raise SimError(400, "Invalid request body: expected a JSON object.")
    name = body.get("model")
    model = ctx.state.model(name) if isinstance(name, str) else None
    if model is None or model.wire != "openai":
        raise SimError(404, f"The model `{name}` does not exist.", code="model_not_found")
    if body.get("previous_response_id") is not None:
        raise SimError(404, "Previous response not found.", param="previous_response_id")
    chat = _chat_body(body)
    pictures = await collect_pictures(ctx.state, chat, model)
    prompt = openai_prompt(chat, model, lambda part: pictures[part["image_url"]["url"]])
    max_out = body.get("max_output_tokens")
    if not isinstance(max_out, int) or isinstance(max_out, bool):
        max_out = None
    if max_out is not None and max_out > model.max_output:  # refused like the provider does
        raise SimError(
            400,
            f"Invalid 'max_output_tokens': integer above maximum value. Expected a value <= "
            f"{model.max_output}, but got {max_out} instead.",
            param="max_output_tokens",
            code="integer_above_max_value",
        )
    if max_out is not None and max_out < LEAST_OUTPUT:  # a cap a gateway shrank too far
        raise SimError(
            400,
            f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
            f"{LEAST_OUTPUT}, but got {max_out} instead.",
            param="max_output_tokens",
            code="integer_below_min_value",
        )
    window = model.context_window
    if prompt.total > window or prompt.total + (max_out or 0) > window:
        if body.get("stream"):  # OpenAI answers 200, then fails the response in the stream
            return _failed_stream(ctx, body, model.name)
        raise SimError(  # OpenAI's words: no count (the gateway has none to learn here)
            400, OVERFLOW, param="input", code="context_length_exceeded"
        )
    cached = ctx.state.prefix_caches[model.name].lookup_and_store(prompt.tokens)
    ctx.entry["prompt_tokens"] = prompt.total
    ctx.entry["cached_tokens"] = cached
    return _answer(ctx, body, chat, model.name, prompt.total, cached, max_out)


def _answer(
    ctx: Ctx,
    body: Mapping[str, Any],
    chat: Mapping[str, Any],
    name: str,
    prompt: int,
    cached: int,
    max_out: int | None,
) -> Response:
    model = ctx.state.model(name)
    assert model is not None
    messages = chat["messages"]
    last = messages[-1] if messages else {}  # an input of reasoning items with no summary text
    last_user = _text_of(last.get("content")) if last.get("role") == "user" else ""
    offered = [
        (str(t["function"].get("name")), t["function"].get("parameters") or {})
        for t in chat["tools"]
    ]
    custom = {str(t.get("name")) for t in body.get("tools") or [] if t.get("type") == "custom"}
    offered += [(n, {"type": "object", "properties": {}}) for n in sorted(custom)]
    ans = answer(
        model,
        last_user=last_user,
        tools=offered,
        forced=None,
        wants_call=last.get("role") == "user",
        max_tokens=max_out,
        room=model.context_window - prompt,
    )
    rid = f"resp_sim{ctx.number:06d}"
    usage = {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": ans.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + ans.completion_tokens,
    }
    status = "incomplete" if ans.finish == "length" else "completed"
    response: dict[str, Any] = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "model": name,
        "output": _output(ans, rid, custom),
        "usage": usage,
        "store": body.get("store", True),
    }
    headers = {"x-request-id": ctx.request_id, "x-sim-prompt-tokens": str(prompt)}
    if body.get("stream"):
        events = _events(response)
        return EventStream(
            ctx.state, events, delay=ctx.chunk_delay, cut_after=ctx.plan.cut_after, headers=headers
        )
    return JSONResponse(response, headers=headers)
