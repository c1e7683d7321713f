"""``POST /v1/chat/completions``: OpenAI's validation, counting, caching, answers and streams."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse, Response

from proxy.sim.completion import Answer, answer
from proxy.sim.counting import Prompt, file_data, openai_functions, openai_prompt
from proxy.sim.documents import pdf_pages
from proxy.sim.errors import SimError
from proxy.sim.images import ImageProblem, Picture, resolve_url
from proxy.sim.models import SimModel
from proxy.sim.recordings import seconds
from proxy.sim.state import SimState
from proxy.sim.streaming import CutBody, EventStream, sse

if TYPE_CHECKING:
    from proxy.sim.ctx import Ctx

__all__ = [
    "EMBEDDING_MODELS",
    "bad_type",
    "bad_value",
    "chat_completions",
    "embeddings",
    "missing_param",
    "validate_chat",
]

KNOWN_PARAMS = frozenset(
    {
        "model", "messages", "audio", "frequency_penalty", "function_call", "functions",
        "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata",
        "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty",
        "prompt_cache_key", "prompt_cache_retention", "reasoning_effort", "response_format",
        "safety_identifier", "seed", "service_tier", "stop", "store", "stream", "stream_options",
        "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
        "web_search_options",
    }
)  # fmt: skip
ROLES = ("system", "assistant", "user", "function", "tool", "developer")
PART_TYPES = ("text", "image_url", "input_audio", "refusal", "audio", "file")
DETAILS = ("auto", "low", "high", "original")
AUDIO_FORMATS = ("wav", "mp3")
_NAME = re.compile(r"^[^\s<|\\/>]+$")
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


# ----------------------------------------------------------------------------------- validation


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def missing_param(param: str) -> SimError:
    return SimError(
        400,
        f"Missing required parameter: '{param}'.",
        param=param,
        code="missing_required_parameter",
    )


def bad_type(param: str, expected: str, value: Any) -> SimError:
    return SimError(
        400,
        f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.",
        param=param,
        code="invalid_type",
    )


def bad_value(param: str, value: Any, allowed: tuple[str, ...]) -> SimError:
    listed = ", ".join(f"'{a}'" for a in allowed[:-1]) + f", and '{allowed[-1]}'"
    return SimError(
        400,
        f"Invalid value: '{value}'. Supported values are: {listed}.",
        param=param,
        code="invalid_value",
    )


def _int_param(body: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_type(key, "an integer", value)
    if value < low:
        raise SimError(
            400,
            f"Invalid '{key}': integer below minimum value. Expected a value >= {low}, "
            f"but got {value} instead.",
            param=key,
            code="integer_below_min_value",
        )
    if high is not None and value > high:
        raise SimError(
            400,
            f"Invalid '{key}': integer above maximum value. Expected a value <= {high}, "
            f"but got {value} instead.",
            param=key,
            code="integer_above_max_value",
        )
    return value


def _validate_part(part: Any, where: str, role: str, index: int) -> None:
    if not isinstance(part, Mapping):
        raise bad_type(where, "an object", part)
    kind = part.get("type")
    if kind is None:
        raise missing_param(f"{where}.type")
    if kind not in PART_TYPES:
        raise bad_value(f"{where}.type", kind, PART_TYPES)
    if kind == "image_url" and role != "user":
        raise SimError(
            400,
            f"Invalid 'messages[{index}]'. Image URLs are only allowed for messages with role "
            f"'user', but this message with role '{role}' contains an image URL.",
            param=f"messages[{index}]",
            code="invalid_value",
        )
    if kind in ("text", "refusal"):
        if kind == "refusal" and role != "assistant":
            raise bad_value(f"{where}.type", kind, ("text", "image_url", "input_audio", "file"))
        if kind not in part:
            raise missing_param(f"{where}.{kind}")
        if not isinstance(part[kind], str):
            raise bad_type(f"{where}.{kind}", "a string", part[kind])
    elif kind == "image_url":
        image = part.get("image_url")
        if image is None:
            raise missing_param(f"{where}.image_url")
        if not isinstance(image, Mapping):
            raise bad_type(f"{where}.image_url", "an object", image)
        if "url" not in image:
            raise missing_param(f"{where}.image_url.url")
        if not isinstance(image["url"], str):
            raise bad_type(f"{where}.image_url.url", "a string", image["url"])
        detail = image.get("detail")
        if detail is not None and detail not in DETAILS:
            raise bad_value(f"{where}.image_url.detail", detail, DETAILS)
    elif kind == "input_audio":
        audio = part.get("input_audio")
        if audio is None:
            raise missing_param(f"{where}.input_audio")
        if not isinstance(audio, Mapping):
            raise bad_type(f"{where}.input_audio", "an object", audio)
        if not isinstance(audio.get("data"), str):
            raise bad_type(f"{where}.input_audio.data", "a string", audio.get("data"))
        if audio.get("format") not in AUDIO_FORMATS:
            raise bad_value(f"{where}.input_audio.format", audio.get("format"), AUDIO_FORMATS)
    elif kind == "file":
        data = file_data(part)
        if data is None:
            raise SimError(
                400,
                f"Invalid '{where}.file': send a PDF as file_data, "
                "'data:application/pdf;base64,...' (the simulator has no uploaded files).",
                param=f"{where}.file",
                code="invalid_value",
            )
        if pdf_pages(data) is None:
            raise SimError(
                400, "The file is not a valid PDF.", param=f"{where}.file", code="invalid_value"
            )
    else:
        raise SimError(400, f"This model does not support '{kind}' content.", param=f"{where}.type")


def _validate_tool_calls(calls: Any, where: str) -> list[str]:
    if not isinstance(calls, list):
        raise bad_type(where, "an array", calls)
    ids = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        if not isinstance(call, Mapping):
            raise bad_type(at, "an object", call)
        for key in ("id", "type", "function"):
            if key not in call:
                raise missing_param(f"{at}.{key}")
        if not isinstance(call["id"], str):
            raise bad_type(f"{at}.id", "a string", call["id"])
        if call["type"] != "function":
            raise bad_value(f"{at}.type", call["type"], ("function",))
        fn = call["function"]
        if not isinstance(fn, Mapping):
            raise bad_type(f"{at}.function", "an object", fn)
        for key in ("name", "arguments"):
            if key not in fn:
                raise missing_param(f"{at}.function.{key}")
            if not isinstance(fn[key], str):
                raise bad_type(f"{at}.function.{key}", "a string", fn[key])
        ids.append(call["id"])
    return ids


def _validate_messages(messages: Any) -> None:
    if messages is None:
        raise missing_param("messages")
    if not isinstance(messages, list):
        raise bad_type("messages", "an array", messages)
    if not messages:
        raise SimError(
            400,
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, Mapping):
            raise bad_type(where, "an object", msg)
        role = msg.get("role")
        if role is None:
            raise missing_param(f"{where}.role")
        if role not in ROLES:
            raise bad_value(f"{where}.role", role, ROLES)
        name = msg.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise bad_type(f"{where}.name", "a string", name)
            if not _NAME.match(name):
                raise SimError(
                    400,
                    f"Invalid '{where}.name': string does not match pattern. Expected a string "
                    "that matches the pattern '^[^\\s<|\\\\/>]+$'.",
                    param=f"{where}.name",
                    code="invalid_value",
                )
        content = msg.get("content")
        has_calls = bool(msg.get("tool_calls")) or msg.get("function_call") is not None
        if "content" not in msg and role != "assistant":
            raise missing_param(f"{where}.content")
        if content is None and not (role == "assistant" and (has_calls or msg.get("refusal"))):
            if role == "assistant":
                raise SimError(
                    400,
                    f"Invalid value for '{where}.content': expected a string, got null.",
                    param=f"{where}.content",
                )
            raise bad_type(f"{where}.content", "one of a string or array of objects", content)
        if content is not None and not isinstance(content, str | list):
            raise bad_type(f"{where}.content", "one of a string or array of objects", content)
        if isinstance(content, list):
            for j, part in enumerate(content):
                _validate_part(part, f"{where}.content[{j}]", role, i)
        if "tool_calls" in msg and msg["tool_calls"] is not None:
            if role != "assistant":
                raise SimError(
                    400,
                    f"Invalid parameter: only messages with role 'assistant' can have 'tool_calls'"
                    f" (found in '{where}').",
                    param=f"{where}.tool_calls",
                )
            _validate_tool_calls(msg["tool_calls"], f"{where}.tool_calls")
        if role == "tool":
            if "tool_call_id" not in msg:
                raise missing_param(f"{where}.tool_call_id")
            if not isinstance(msg["tool_call_id"], str):
                raise bad_type(f"{where}.tool_call_id", "a string", msg["tool_call_id"])
        if role == "function" and not isinstance(name, str):
            raise missing_param(f"{where}.name")
    _validate_pairing(messages)


def _validate_pairing(messages: list[Mapping[str, Any]]) -> None:
    """Tool messages answer the assistant tool_calls right before them, all of them."""
    pending: list[str] | None = None  # ids the last assistant tool_calls message still awaits
    owner = -1
    for i, msg in enumerate(messages):
        if msg.get("role") == "tool":
            if pending is None or msg.get("tool_call_id") not in pending:
                raise SimError(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            pending.remove(msg["tool_call_id"])
            continue
        _unanswered(pending, owner)
        pending = None
        if msg.get("role") == "assistant" and msg.get("tool_calls"):
            pending = [c["id"] for c in msg["tool_calls"]]
            owner = i
    _unanswered(pending, owner)


def _unanswered(pending: list[str] | None, owner: int) -> None:
    if pending:
        raise SimError(
            400,
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            + ", ".join(pending),
            param=f"messages.[{owner}].role",
        )


def _validate_functions(functions: Any) -> None:
    """The legacy ``functions``: an array of objects, each with a string ``name``."""
    if functions is None:
        return
    if not isinstance(functions, list):
        raise bad_type("functions", "an array", functions)
    for i, fn in enumerate(functions):
        where = f"functions[{i}]"
        if not isinstance(fn, Mapping):
            raise bad_type(where, "an object", fn)
        if "name" not in fn:
            raise missing_param(f"{where}.name")
        if not isinstance(fn["name"], str):
            raise bad_type(f"{where}.name", "a string", fn["name"])


def _validate_tools(body: Mapping[str, Any]) -> None:
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise bad_type("tools", "an array", tools)
        for i, tool in enumerate(tools):
            where = f"tools[{i}]"
            if not isinstance(tool, Mapping):
                raise bad_type(where, "an object", tool)
            if tool.get("type") != "function":
                raise bad_value(f"{where}.type", tool.get("type"), ("function", "custom"))
            fn = tool.get("function")
            if fn is None:
                raise missing_param(f"{where}.function")
            if not isinstance(fn, Mapping):
                raise bad_type(f"{where}.function", "an object", fn)
            if "name" not in fn:
                raise missing_param(f"{where}.function.name")
            if not isinstance(fn["name"], str) or not _TOOL_NAME.match(fn["name"]):
                raise SimError(
                    400,
                    f"Invalid '{where}.function.name': string does not match pattern. Expected a "
                    "string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                    param=f"{where}.function.name",
                    code="invalid_value",
                )
            params = fn.get("parameters")
            if params is not None and not isinstance(params, Mapping):
                raise bad_type(f"{where}.function.parameters", "an object", params)
    _validate_functions(body.get("functions"))
    choice = body.get("tool_choice")
    if choice is None:
        return
    names = [fn.get("name") for fn in openai_functions(body)]
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise bad_value("tool_choice", choice, ("none", "auto", "required"))
        if choice != "none" and not names:
            raise SimError(
                400,
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
                "specified.",
                param="tool_choice",
            )
        return
    if not isinstance(choice, Mapping) or choice.get("type") != "function":
        raise bad_type("tool_choice", "one of a string or an object", choice)
    fn = choice.get("function")  # each level typed as OpenAI types it, never assumed an object
    if fn is None:
        raise missing_param("tool_choice.function")
    if not isinstance(fn, Mapping):
        raise bad_type("tool_choice.function", "an object", fn)
    name = fn.get("name")
    if name is None:
        raise missing_param("tool_choice.function.name")
    if not isinstance(name, str):
        raise bad_type("tool_choice.function.name", "a string", name)
    if name not in names:
        raise SimError(
            400,
            f"Invalid value for 'tool_choice': function '{name}' is not one of the 'tools'.",
            param="tool_choice",
        )


def validate_chat(body: Any, *, strict: bool = True) -> None:
    """OpenAI's shape checks (everything that does not need the model)."""
    if not isinstance(body, Mapping):
        raise SimError(400, "Invalid request body: expected a JSON object.")
    model = body.get("model")
    if model is None:
        raise SimError(400, "you must provide a model parameter")
    if not isinstance(model, str):
        raise bad_type("model", "a string", model)
    unknown = sorted(set(body) - KNOWN_PARAMS)
    if unknown and strict:
        word = "argument" if len(unknown) == 1 else "arguments"
        raise SimError(400, f"Unrecognized request {word} supplied: {', '.join(unknown)}")
    _validate_messages(body.get("messages"))
    _int_param(body, "max_tokens", 1)
    _int_param(body, "max_completion_tokens", 1)
    _int_param(body, "n", 1, 128)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad_type("stream", "a boolean", stream)
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise SimError(
                400,
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                param="stream_options",
            )
        if not isinstance(options, Mapping):
            raise bad_type("stream_options", "an object", options)
    temperature = body.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise bad_type("temperature", "a decimal", temperature)
        if not 0 <= temperature <= 2:
            raise SimError(
                400,
                f"Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but "
                f"got {temperature} instead.",
                param="temperature",
                code="decimal_above_max_value",
            )
    _validate_tools(body)
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, Mapping):
            raise bad_type("response_format", "an object", fmt)
        if fmt.get("type") not in ("text", "json_object", "json_schema"):
            raise bad_value(
                "response_format.type", fmt.get("type"), ("text", "json_object", "json_schema")
            )
        if fmt.get("type") == "json_schema" and not isinstance(fmt.get("json_schema"), Mapping):
            raise missing_param("response_format.json_schema")


# ------------------------------------------------------------------------------------- counting


async def collect_pictures(
    state: SimState, body: Mapping[str, Any], model: SimModel
) -> dict[str, Picture]:
    """Every image of the request, resolved (SimError when the provider would refuse one)."""
    out: dict[str, Picture] = {}
    config = state.config
    for i, msg in enumerate(body["messages"]):
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if part.get("type") == "input_audio":
                _check_audio(part, model, f"messages.[{i}].content.[{j}]")
            if part.get("type") != "image_url":
                continue
            if model.image_rule is None:
                raise SimError(
                    400,
                    "Invalid content type. image_url is only supported by certain models.",
                    param=f"messages.[{i}].content.[{j}].type",
                )
            url = part["image_url"]["url"]
            if url in out:
                continue
            try:
                out[url] = await resolve_url(
                    url,
                    assumed=config.assumed_image_size,
                    fetch_loopback=config.fetch_loopback_images,
                )
            except ImageProblem as exc:
                raise _image_error(
                    str(exc), f"messages[{i}].content[{j}].image_url.url", url
                ) from None
    return out


def _check_audio(part: Mapping[str, Any], model: SimModel, where: str) -> None:
    """An audio part reaches only a model that takes audio, and only as audio it can read."""
    if not model.audio_input:
        raise SimError(
            400,
            "Invalid content type. input_audio is only supported by certain models.",
            param=f"{where}.type",
        )
    if seconds(part["input_audio"]["data"]) is None:
        raise SimError(
            400,
            "The audio file could not be processed. Please check the format and try again.",
            param=f"{where}.input_audio",
            code="invalid_value",
        )


def _image_error(problem: str, param: str, url: str) -> SimError:
    if "base64" in problem:
        return SimError(
            400,
            f"Invalid '{param}'. Expected a base64-encoded data URL with an image MIME type (e.g. "
            "'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got an invalid value.",
            param=param,
            code="invalid_value",
        )
    if problem.startswith("Error while downloading"):
        return SimError(400, problem, param=None, code="invalid_image_url")
    return SimError(
        400,
        "You uploaded an unsupported image. Please make sure your image has of one the following "
        "formats: ['png', 'jpeg', 'gif', 'webp'].",
        param=None,
        code="invalid_image_format",
    )


def _overflow(model: SimModel, prompt: int, completion: int, tools: int) -> SimError:
    window = model.context_window
    if completion:
        parts = f"{prompt - tools} in the messages, "
        if tools:
            parts += f"{tools} in the functions, "
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt + completion} tokens ({parts}{completion} in the completion). Please reduce "
            "the length of the messages or completion."
        )
    else:
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {prompt} tokens"
            + (f" (including {tools} in the functions)" if tools else "")
            + ". Please reduce the length of the messages."
        )
    return SimError(400, message, param="messages", code="context_length_exceeded")


# ------------------------------------------------------------------------------------ answering


def _last_user(messages: list[Mapping[str, Any]]) -> tuple[str, bool]:
    """(text of the last user message, whether the conversation ends with it)."""
    for msg in reversed(messages):
        if msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if p.get("type") == "text")
            return str(content or ""), msg is messages[-1]
    return "", False


def _forced(body: Mapping[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if choice == "required":
        return "*"
    if isinstance(choice, Mapping):
        return str((choice.get("function") or {}).get("name"))
    return None


def _usage(model: SimModel, prompt: int, cached: int, completion: int) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    if model.deepseek_usage:
        usage["prompt_cache_hit_tokens"] = cached
        usage["prompt_cache_miss_tokens"] = prompt - cached
    return usage


def _message(ans: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": ans.text if not ans.tool_calls else None,
        "refusal": None,
        "annotations": [],
    }
    if ans.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in ans.tool_calls
        ]
    return message


def _chunks(
    base: dict[str, Any], index: int, ans: Answer, usage_null: bool
) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out = {
            **base,
            "choices": [
                {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
            ],
        }
        if usage_null:
            out["usage"] = None
        return out

    chunks = [
        chunk({"role": "assistant", "content": "" if not ans.tool_calls else None, "refusal": None})
    ]
    if ans.tool_calls:
        for k, call in enumerate(ans.tool_calls):
            head = {
                "index": k,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            chunks.append(chunk({"tool_calls": [head]}))
            args = call.arguments
            step = max(1, len(args) // 3 + 1)
            for start in range(0, len(args), step):
                piece = {"index": k, "function": {"arguments": args[start : start + step]}}
                chunks.append(chunk({"tool_calls": [piece]}))
    else:
        for word in re.findall(r"\s*\S+", ans.text):
            chunks.append(chunk({"content": word}))
    chunks.append(chunk({}, ans.finish))
    return chunks


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _chat_model(state: SimState, body: Any) -> SimModel:
    """The OpenAI model a valid request names (404 for any other, as OpenAI does)."""
    validate_chat(body, strict=state.config.strict_params)
    name = body["model"]
    model = state.model(name)
    if model is None or model.wire != "openai":
        raise SimError(
            404,
            f"The model `{name}` does not exist or you do not have access to it.",
            param=None,
            code="model_not_found",
        )
    return model


def _max_out(body: Mapping[str, Any], model: SimModel) -> int | None:
    """The completion budget asked for, refused when it is past the model's output limit."""
    max_out: int | None = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_out is not None and max_out > model.max_output:
        key = "max_completion_tokens" if body.get("max_completion_tokens") else "max_tokens"
        raise SimError(
            400,
            f"{key} is too large: {max_out}. This model supports at most {model.max_output} "
            f"completion tokens, whereas you provided {max_out}.",
            param=key,
            code="invalid_value",
        )
    return max_out


async def _count_and_cache(
    ctx: Ctx, body: Mapping[str, Any], model: SimModel, max_out: int | None
) -> tuple[Prompt, int]:
    """(the prompt, its tokens served from the prefix cache): counted, checked against the
    context window, then looked up and stored, as billing at OpenAI would see it."""
    pictures = await collect_pictures(ctx.state, body, model)
    prompt = openai_prompt(body, model, lambda part: pictures[part["image_url"]["url"]])
    tools_tokens = prompt.breakdown.get("tools", 0)
    if prompt.total > model.context_window or prompt.total + (max_out or 0) > model.context_window:
        raise _overflow(model, prompt.total, max_out or 0, tools_tokens)
    cached = ctx.state.prefix_caches[model.name].lookup_and_store(prompt.tokens)
    ctx.entry["prompt_tokens"] = prompt.total
    ctx.entry["cached_tokens"] = cached
    return prompt, cached


def _answers(
    body: Mapping[str, Any], model: SimModel, prompt_total: int, max_out: int | None
) -> list[Answer]:
    """The ``n`` choices, each from its own seed so that they differ."""
    last_user, ends_with_user = _last_user(body["messages"])
    offered = [(str(fn.get("name")), fn.get("parameters") or {}) for fn in openai_functions(body)]
    no_tools = body.get("tool_choice") == "none"
    fmt = body.get("response_format")
    schema = fmt.get("json_schema") if isinstance(fmt, Mapping) else None
    return [
        answer(
            model,
            last_user=last_user + (f"\x00{i}" if i else ""),
            tools=[] if no_tools else offered,
            forced=_forced(body),
            wants_call=ends_with_user,
            max_tokens=max_out,
            room=model.context_window - prompt_total,
            schema=schema.get("schema") if isinstance(schema, Mapping) else None,
        )
        for i in range(body.get("n") or 1)
    ]


def _stream(
    ctx: Ctx,
    body: Mapping[str, Any],
    ident: dict[str, Any],
    answers: list[Answer],
    usage: dict[str, Any],
    headers: dict[str, str],
) -> Response:
    """The SSE reply, bent by the request's faults: a torn chunk, no usage chunk, a cut."""
    plan = ctx.plan
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base = {
        "id": ident["id"],
        "object": "chat.completion.chunk",
        "created": ident["created"],
        "model": ident["model"],
        "system_fingerprint": "fp_sim",
    }
    chunks: list[dict[str, Any]] = []
    for i, ans in enumerate(answers):
        chunks += _chunks(base, i, ans, include_usage)
    events = [sse(_dump(c)) for c in chunks]
    if plan.malformed:
        events.insert(
            1,
            b'data: {"id": "'
            + str(base["id"]).encode()
            + b'", "choices": [{"delta": {"content": "oops\n\n',
        )
    if include_usage and not plan.no_usage:
        events.append(sse(_dump({**base, "choices": [], "usage": usage})))
    events.append(b"data: [DONE]\n\n")
    return EventStream(
        ctx.state, events, delay=ctx.chunk_delay, cut_after=plan.cut_after, headers=headers
    )


def _completion(
    ctx: Ctx,
    ident: dict[str, Any],
    answers: list[Answer],
    usage: dict[str, Any],
    headers: dict[str, str],
) -> Response:
    """The JSON reply, bent by the request's faults: truncated JSON, no usage, a cut body."""
    plan = ctx.plan
    payload: dict[str, Any] = {
        "id": ident["id"],
        "object": "chat.completion",
        "created": ident["created"],
        "model": ident["model"],
        "system_fingerprint": "fp_sim",
        "service_tier": "default",
        "choices": [
            {"index": i, "message": _message(a), "logprobs": None, "finish_reason": a.finish}
            for i, a in enumerate(answers)
        ],
    }
    if not plan.no_usage:
        payload["usage"] = usage
    if plan.malformed:
        return Response(
            _dump(payload)[:-7].encode(), 200, headers=headers, media_type="application/json"
        )
    if plan.cut_after is not None:
        return CutBody(_dump(payload).encode())
    return JSONResponse(payload, headers=headers)


async def chat_completions(ctx: Ctx) -> Response:
    body = ctx.body
    model = _chat_model(ctx.state, body)
    max_out = _max_out(body, model)
    prompt, cached = await _count_and_cache(ctx, body, model, max_out)
    answers = _answers(body, model, prompt.total, max_out)
    completion = sum(a.completion_tokens for a in answers)
    usage = _usage(model, prompt.total, cached, completion)
    if ctx.plan.lie is not None:
        usage["prompt_tokens"] = ctx.plan.lie
    ident = {  # what names this completion in every chunk or body
        "id": f"chatcmpl-sim{ctx.number:06d}",
        "created": int(time.time()),
        "model": body["model"],
    }
    headers = {"x-request-id": ctx.request_id, "x-sim-prompt-tokens": str(prompt.total)}
    if body.get("stream"):
        return _stream(ctx, body, ident, answers, usage, headers)
    return _completion(ctx, ident, answers, usage, headers)


# ----------------------------------------------------------------------------------- embeddings

#: OpenAI's embedding models: (native dimensions, whether ``dimensions`` may shorten them).
EMBEDDING_MODELS: dict[str, tuple[int, bool]] = {
    "text-embedding-3-small": (1536, True),
    "text-embedding-3-large": (3072, True),
    "text-embedding-ada-002": (1536, False),
}
#: Tokens one input may have, and one request in all (OpenAI's published limits).
EMBEDDING_INPUT_LIMIT = 8192
EMBEDDING_REQUEST_LIMIT = 300_000
EMBEDDING_MAX_INPUTS = 2048
_EMBEDDING_TOKENIZER = "cl100k_base"


def _embedding_inputs(value: Any) -> list[str | list[int]]:
    """The inputs of a body's ``input`` (a string, strings, token ids, lists of token ids), as
    OpenAI accepts them; anything else is its 400."""
    invalid = SimError(
        400,
        "'$.input' is invalid. Please check the API reference: "
        "https://platform.openai.com/docs/api-reference.",
        param="input",
    )

    def ids(v: Any) -> bool:
        return isinstance(v, list) and all(type(i) is int for i in v)

    if isinstance(value, str):
        items: list[Any] = [value]
    elif ids(value) and value:
        items = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) or ids(v) for v in value):
        items = value
    else:
        raise invalid
    if len(items) > EMBEDDING_MAX_INPUTS or any(len(v) == 0 for v in items):
        raise invalid
    return items


def _embedding_vector(model: str, item: str | list[int], dims: int) -> list[float]:
    """A deterministic unit vector for one input: the same text always embeds the same way."""
    import hashlib
    import math
    import random

    seed = hashlib.sha256(f"{model}\0{item!r}".encode()).digest()
    rng = random.Random(seed)
    raw = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def _embedding_dims(body: Mapping[str, Any], model: str) -> int:
    native, shortens = EMBEDDING_MODELS[model]
    dims = body.get("dimensions")
    if dims is None:
        return native
    if not shortens:
        raise SimError(400, "This model does not support specifying dimensions.", "dimensions")
    if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= native:
        raise SimError(400, f"Invalid 'dimensions': must be 1 to {native}.", param="dimensions")
    return dims


def _encoded(vector: list[float], fmt: str) -> list[float] | str:
    if fmt == "float":
        return vector
    import base64
    import struct

    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


async def embeddings(ctx: Ctx) -> Response:
    """``POST /v1/embeddings``: inputs counted by cl100k_base (token ids count as themselves);
    one over the model's input limit, or a request over its total, refused as OpenAI does."""
    from proxy.sim.tokens import get_encoder

    body = ctx.body
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise SimError(400, "you must provide a model parameter", param="model")
    name = body["model"]
    if name not in EMBEDDING_MODELS:
        raise SimError(
            404,
            f"The model `{name}` does not exist or you do not have access to it.",
            code="model_not_found",
        )
    items = _embedding_inputs(body.get("input"))
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise SimError(
            400, "Invalid 'encoding_format': must be 'float' or 'base64'.", "encoding_format"
        )
    dims = _embedding_dims(body, name)
    encoder = get_encoder(_EMBEDDING_TOKENIZER)
    counts = [len(i) if isinstance(i, list) else encoder.count(i) for i in items]
    for n in counts:
        if n > EMBEDDING_INPUT_LIMIT:
            raise SimError(
                400,
                f"This model's maximum context length is {EMBEDDING_INPUT_LIMIT} tokens, however "
                f"you requested {n} tokens ({n} in your prompt; 0 for the completion). Please "
                "reduce your prompt; or completion length.",
            )
    total = sum(counts)
    if total > EMBEDDING_REQUEST_LIMIT:
        raise SimError(
            400, f"Requested {total} tokens, max {EMBEDDING_REQUEST_LIMIT} tokens per request"
        )
    ctx.entry["prompt_tokens"] = total
    prompt = ctx.plan.lie if ctx.plan.lie is not None else total
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(vector, fmt)}
        for i, vector in enumerate(_embedding_vector(name, v, dims) for v in items)
    ]
    usage = {"prompt_tokens": prompt, "total_tokens": prompt}
    if ctx.plan.no_usage:
        return JSONResponse({"object": "list", "data": data, "model": name})
    headers = {"x-request-id": ctx.request_id, "x-sim-prompt-tokens": str(total)}
    payload = {"object": "list", "data": data, "model": name, "usage": usage}
    return JSONResponse(payload, headers=headers)
