"""How the simulated providers count a prompt: the oracle routefit's meter is tested against.

Every function renders a (validated) request body into the token ids the model would see; the
prompt size is the length of that sequence. The rules (see docs/simulator.md):

openai
    OpenAI cookbook: each message costs ``per_message`` (3) tokens plus the tokens of its role and
    of every string field (content, name, tool_call_id), ``per_name`` (1) more with a name; the
    reply is primed with ``priming`` (3). Content parts are tokenized one by one; images cost
    their rule's tokens. Assistant tool calls cost ``per_tool_call`` (3) + name + arguments each.
    Tool definitions follow the cookbook's function-schema rule (``func_init`` + ``name:desc``,
    ``prop_init``, per property ``prop_key`` + ``key:type:desc``, enums ``enum_init`` +
    ``enum_item`` + item, then ``func_end``); nested schemas (which the cookbook ignores) add
    the tokens of their compact JSON. A ``json_schema`` response format adds the tokens of its
    compact JSON.
deepseek
    The DeepSeek-V3 chat template rendered as ONE string and tokenized once (its markers are
    single added tokens); tools are rendered into the system prompt.
anthropic
    ``per_message`` (4) per message, text blocks by the tokenizer, images by the ``anthropic``
    rule, tool_use / tool_result blocks ``per_tool_call`` (6) + name + JSON input / content,
    ``priming`` (3); with tools, the tool-use system prompt (346 tokens, 313 when
    ``tool_choice`` forces a tool) plus each tool's compact JSON. Order: tools, system, messages.
gemini
    Tools first: each function declaration's compact JSON (other tools, ``googleSearch`` ...,
    theirs); a JSON answer's schema (``responseSchema`` / ``responseJsonSchema``) its compact
    JSON. Then ``systemInstruction`` and every content: ``per_message`` (3) each, text parts by
    the tokenizer (thought parts of earlier turns are not part of the prompt), images by the
    model's rule, a PDF sent as data 258 a page, audio and video sent as data by their length
    (``sim.recordings``), other media a flat ``GEMINI_MEDIA_TOKENS`` (258), ``functionCall``
    / ``functionResponse`` parts ``per_tool_call`` (4) + name + compact JSON of ``args`` /
    ``response``, any other part its compact JSON; ``priming`` (2) at the end.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.sim.documents import pdf_pages
from proxy.sim.images import Picture, image_tokens
from proxy.sim.models import SimModel
from proxy.sim.recordings import AUDIO_SECOND, USER_AUDIO_SECOND, seconds, video_tokens
from proxy.sim.tokens import (
    CALL,
    END,
    FILL,
    NAME,
    PRIME,
    START,
    TOOLS,
    Encoder,
    digest,
    get_encoder,
    image_token_ids,
    specials,
)

__all__ = [
    "GEMINI_MEDIA_TOKENS",
    "URLSAFE",
    "Prompt",
    "anthropic_prompt",
    "completion_count",
    "deepseek_render",
    "file_data",
    "gemini_media",
    "gemini_prompt",
    "openai_prompt",
    "pdf_ids",
]

#: Resolves an image reference (an OpenAI image_url part, an Anthropic image block) to a Picture.
Pictures = Callable[[Mapping[str, Any]], Picture]

DS_BOS = "<｜begin▁of▁sentence｜>"
DS_EOS = "<｜end▁of▁sentence｜>"
DS_USER = "<｜User｜>"
DS_ASSISTANT = "<｜Assistant｜>"
DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
DS_CALLS_END = "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN = "<｜tool▁call▁begin｜>"
DS_CALL_END = "<｜tool▁call▁end｜>"
DS_SEP = "<｜tool▁sep｜>"
DS_OUTPUTS_BEGIN = "<｜tool▁outputs▁begin｜>"
DS_OUTPUTS_END = "<｜tool▁outputs▁end｜>"
DS_OUTPUT_BEGIN = "<｜tool▁output▁begin｜>"
DS_OUTPUT_END = "<｜tool▁output▁end｜>"


@dataclass
class Prompt:
    """The prompt as the model sees it: token ids, where they came from, cache breakpoints."""

    tokens: list[int]
    breakdown: dict[str, int] = field(default_factory=dict)
    #: Anthropic: token offsets at which a cache_control breakpoint ends a prefix.
    breakpoints: list[int] = field(default_factory=list)
    images: int = 0
    #: Anthropic: token offsets at which each content block ends (tools, system blocks, message
    #: blocks), where a breakpoint looks back for an earlier request's write.
    block_ends: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.tokens)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _strip_period(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


# --------------------------------------------------------------------------------------- OpenAI


def openai_functions(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The function definitions of a request (``tools`` and legacy ``functions``)."""
    out: list[Mapping[str, Any]] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, Mapping) and isinstance(tool.get("function"), Mapping):
            out.append(tool["function"])
    for fn in body.get("functions") or []:
        if isinstance(fn, Mapping):
            out.append(fn)
    return out


def openai_tools_tokens(
    functions: Sequence[Mapping[str, Any]], m: SimModel, enc: Encoder
) -> list[int]:
    """The cookbook's function-schema rule, as a token sequence of exactly that length."""
    if not functions:
        return []
    content: list[int] = []
    total = 0
    for fn in functions:
        total += m.func_init
        line = enc.encode(f"{fn.get('name', '')}:{_strip_period(_text(fn.get('description')))}")
        content += line
        total += len(line)
        params = fn.get("parameters")
        if not isinstance(params, Mapping):
            continue
        rest = {k: v for k, v in params.items() if k not in ("type", "properties", "required")}
        if rest:  # beyond the cookbook ($defs, a top-level union...): its JSON
            ids = enc.encode(_compact(rest))
            content += ids
            total += len(ids)
        props = params.get("properties")
        if not isinstance(props, Mapping) or not props:
            continue
        total += m.prop_init
        for key, prop in props.items():
            prop = prop if isinstance(prop, Mapping) else {}
            total += m.prop_key
            enum = prop.get("enum")
            if isinstance(enum, list):
                total += m.enum_init
                for item in enum:
                    ids = enc.encode(_text(item))
                    content += ids
                    total += m.enum_item + len(ids)
            kind = prop.get("type", "")
            kind = "|".join(map(str, kind)) if isinstance(kind, list) else _text(kind)
            ids = enc.encode(f"{key}:{kind}:{_strip_period(_text(prop.get('description')))}")
            content += ids
            total += len(ids)
            nested = {k: v for k, v in prop.items() if k not in ("type", "description", "enum")}
            if nested:  # beyond the cookbook (nested schemas, unions, defaults): their JSON
                ids = enc.encode(_compact(nested))
                content += ids
                total += len(ids)
    total += m.func_end
    if total >= len(content):
        return content + specials(FILL, total - len(content))
    return content[:total]


def pdf_ids(data: str, enc: Encoder, rule: str, text: bool = True) -> tuple[list[int], int]:
    """(token ids, of which picture tokens) of a base64 PDF: each page's text (when the
    provider reads it) and a picture of the page by ``rule`` (``proxy.sim.documents``)."""
    ids: list[int] = []
    pictures = 0
    for page in pdf_pages(data) or ():
        if text:
            ids += enc.encode(page.text)
        picture = image_token_ids(page.key, image_tokens(rule, page.width, page.height))
        pictures += len(picture)
        ids += picture
    return ids, pictures


def file_data(part: Mapping[str, Any]) -> str | None:
    """The base64 of a chat ``file`` part's PDF data URL (None for anything else)."""
    file = part.get("file")
    url = file.get("file_data") if isinstance(file, Mapping) else None
    prefix = "data:application/pdf;base64,"
    return url[len(prefix) :] if isinstance(url, str) and url.startswith(prefix) else None


def _openai_part(
    part: Mapping[str, Any], m: SimModel, enc: Encoder, pictures: Pictures
) -> tuple[list[int], int]:
    """(token ids, of which picture tokens) of one content part."""
    kind = part.get("type")
    if kind == "file":
        return pdf_ids(file_data(part) or "", enc, m.image_rule or "flat:0")
    if kind == "input_audio":  # read, or refused, before counting (wire_openai._check_audio)
        data = str((part.get("input_audio") or {}).get("data") or "")
        n = math.ceil((seconds(data) or 0.0) * USER_AUDIO_SECOND)
        ids = image_token_ids(digest(data), n)
        return ids, len(ids)
    if kind == "image_url":
        pic = pictures(part)
        detail = (part.get("image_url") or {}).get("detail") or "auto"
        n = image_tokens(m.image_rule or "flat:0", pic.width, pic.height, detail)
        ids = image_token_ids(pic.key, n)
        return ids, len(ids)
    return enc.encode(_text(part.get(str(kind)))), 0  # text / refusal


def openai_message_tokens(
    msg: Mapping[str, Any], m: SimModel, enc: Encoder, pictures: Pictures
) -> tuple[list[int], int]:
    """(token ids, of which image tokens) of one message under the cookbook rule."""
    seq = specials(START, min(m.per_message, 1))
    seq += enc.encode(_text(msg.get("role")))
    if isinstance(msg.get("name"), str):
        seq += specials(NAME, m.per_name) + enc.encode(msg["name"])
    images = 0
    content = msg.get("content")
    if isinstance(content, str):
        seq += enc.encode(content)
    elif isinstance(content, list):
        for part in content:
            ids, pictures_of = _openai_part(part, m, enc, pictures)
            images += pictures_of
            seq += ids
    calls = list(msg.get("tool_calls") or [])
    if isinstance(msg.get("function_call"), Mapping):
        calls.append({"function": msg["function_call"]})
    for call in calls:
        fn = call.get("function") or {}
        seq += specials(CALL, m.per_tool_call)
        seq += enc.encode(_text(fn.get("name"))) + enc.encode(_text(fn.get("arguments")))
    if isinstance(msg.get("tool_call_id"), str):
        seq += enc.encode(msg["tool_call_id"])
    seq += specials(END, m.per_message - 1)
    return seq, images


def openai_prompt(body: Mapping[str, Any], m: SimModel, pictures: Pictures) -> Prompt:
    """The prompt of a chat-completions request on an ``openai``- or ``deepseek``-format model."""
    if m.chat_format == "deepseek":
        enc = get_encoder(m.tokenizer, m.token_scale, m.class_rates)
        tokens = enc.encode(deepseek_render(body))
        return Prompt(tokens, {"template": len(tokens)})
    enc = get_encoder(m.tokenizer, m.token_scale, m.class_rates)
    tokens = openai_tools_tokens(openai_functions(body), m, enc)
    breakdown = {"tools": len(tokens)}
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        ids = enc.encode(_compact(fmt.get("json_schema")))
        tokens += ids
        breakdown["response_format"] = len(ids)
    images = 0
    text = 0
    for msg in body.get("messages") or []:
        seq, n = openai_message_tokens(msg, m, enc, pictures)
        tokens += seq
        text += len(seq) - n
        images += n
    tokens += specials(PRIME, m.priming)
    breakdown.update(messages=text, images=images, priming=m.priming)
    return Prompt(tokens, breakdown, images=images)


# ------------------------------------------------------------------------------------- DeepSeek


def _flat_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            _text(p.get("text"))
            for p in content
            if isinstance(p, Mapping) and p.get("type") == "text"
        )
    return ""


def _deepseek_tools(functions: Sequence[Mapping[str, Any]]) -> str:
    lines = ["## Tools", "", "You have access to the following tools:", ""]
    for fn in functions:
        lines += [
            f"### {_text(fn.get('name'))}",
            f"Description: {_text(fn.get('description'))}",
            "",
            f"Parameters: {json.dumps(fn.get('parameters') or {}, ensure_ascii=False)}",
            "",
        ]
    return "\n".join(lines)


def deepseek_render(body: Mapping[str, Any]) -> str:
    """The DeepSeek-V3 chat template, as one string (generation prompt included).

    Faithful to the published template, with its two state bugs fixed (``is_first`` and
    ``is_output_first`` are reset per message / per run of tool outputs): system messages are
    joined with a blank line after BOS, tools are appended to the system prompt, an assistant
    turn that follows tool outputs continues after ``<｜tool▁outputs▁end｜>`` without its own
    ``<｜Assistant｜>`` marker, and no generation marker follows a final tool output.
    """
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    system = "\n\n".join(
        _flat_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )
    functions = openai_functions(body)
    if functions:
        system = (system + "\n\n" if system else "") + _deepseek_tools(functions)
    out = [DS_BOS, system]
    in_tools = False
    for msg in messages:
        role = msg.get("role")
        if role in ("system", "developer"):
            continue
        if role == "user":
            if in_tools:
                out.append(DS_OUTPUTS_END)
                in_tools = False
            out += [DS_USER, _flat_text(msg.get("content"))]
        elif role == "assistant":
            content = _flat_text(msg.get("content"))
            if "</think>" in content:
                content = content.split("</think>")[-1]
            out.append(DS_OUTPUTS_END if in_tools else DS_ASSISTANT)
            in_tools = False
            out.append(content)
            calls = msg.get("tool_calls") or []
            if calls:
                out.append(DS_CALLS_BEGIN)
                for i, call in enumerate(calls):
                    fn = call.get("function") or {}
                    out += [
                        "\n" if i else "",
                        DS_CALL_BEGIN,
                        _text(call.get("type") or "function"),
                        DS_SEP,
                        f"{_text(fn.get('name'))}\n```json\n{_text(fn.get('arguments'))}\n```",
                        DS_CALL_END,
                    ]
                out.append(DS_CALLS_END)
            out.append(DS_EOS)
        elif role in ("tool", "function"):
            out.append("\n" + DS_OUTPUT_BEGIN if in_tools else DS_OUTPUTS_BEGIN + DS_OUTPUT_BEGIN)
            out += [_flat_text(msg.get("content")), DS_OUTPUT_END]
            in_tools = True
    out.append(DS_OUTPUTS_END if in_tools else DS_ASSISTANT)
    return "".join(out)


# ------------------------------------------------------------------------------------ Anthropic


#: Blocks of server tools (run by Anthropic, their calls and results both in the assistant's
#: turn): a client sends them back as they came; the model reads them as their JSON.
SERVER_BLOCKS = frozenset(
    {
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
    }
)
#: Blocks the model reads as their JSON: the server tools', a ``search_result`` and a
#: ``container_upload``.
READ_AS_JSON = SERVER_BLOCKS | {"search_result", "container_upload"}


def _tool_choice_forced(body: Mapping[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return isinstance(choice, Mapping) and choice.get("type") in ("any", "tool")


def anthropic_prompt(body: Mapping[str, Any], m: SimModel, pictures: Pictures) -> Prompt:
    """The prompt of a Messages API request, with its cache breakpoints."""
    enc = get_encoder(m.tokenizer, m.token_scale, m.class_rates)
    tokens: list[int] = []
    points: list[int] = []
    ends: list[int] = []
    breakdown: dict[str, int] = {}
    images = 0

    def mark(block: Any) -> None:
        """The end of a block: where a later breakpoint may read, and its own when marked."""
        ends.append(len(tokens))
        if isinstance(block, Mapping) and block.get("cache_control"):
            points.append(len(tokens))

    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping)]
    if tools:
        forced = _tool_choice_forced(body)
        tokens += specials(TOOLS, m.tool_system_tokens_forced if forced else m.tool_system_tokens)
        for tool in tools:
            spec = {k: tool[k] for k in ("name", "description", "input_schema") if k in tool}
            tokens += enc.encode(_compact(spec))
            mark(tool)
    breakdown["tools"] = len(tokens)

    def blocks(content: Any) -> list[Any]:
        return (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        )

    def block_tokens(block: Mapping[str, Any]) -> list[int]:
        nonlocal images
        kind = block.get("type")
        if kind == "text":
            return enc.encode(_text(block.get("text")))
        if kind == "image":
            pic = pictures(block)
            ids = image_token_ids(
                pic.key, image_tokens(m.image_rule or "flat:0", pic.width, pic.height)
            )
            images += len(ids)
            return ids
        if kind == "document":
            return document_tokens(block)
        if kind == "tool_use":
            return (
                specials(CALL, m.per_tool_call)
                + enc.encode(_text(block.get("name")))
                + enc.encode(_compact(block.get("input", {})))
            )
        if kind == "tool_result":
            ids = specials(CALL, m.per_tool_call)
            for inner in blocks(block.get("content")):
                ids += block_tokens(inner)
            return ids
        if kind in READ_AS_JSON:
            return enc.encode(_compact(block))
        return []  # thinking blocks of earlier turns are not part of the prompt

    def document_tokens(block: Mapping[str, Any]) -> list[int]:
        """Each page's text and a picture of the page (``proxy.sim.documents``)."""
        nonlocal images
        source = block.get("source") or {}
        if source.get("type") == "text":
            return enc.encode(_text(source.get("data")))
        if source.get("type") != "base64":  # a URL or file the simulator cannot open: its JSON
            return enc.encode(_compact(block))
        ids, pictures = pdf_ids(source["data"], enc, m.image_rule or "flat:0")
        images += pictures
        return ids

    start = len(tokens)
    system = body.get("system")
    if system:
        tokens += specials(START, m.per_message)
        for block in blocks(system):
            tokens += block_tokens(block)
            mark(block)
    breakdown["system"] = len(tokens) - start
    start = len(tokens)
    for msg in body.get("messages") or []:
        tokens += specials(START, m.per_message)
        for block in blocks(msg.get("content")):
            tokens += block_tokens(block)
            mark(block)
    if body.get("cache_control") and ends and ends[-1] not in points:
        points.append(ends[-1])  # automatic caching: a breakpoint on the last block
    tokens += specials(PRIME, m.priming)
    breakdown["messages"] = len(tokens) - start - images
    breakdown["images"] = images
    return Prompt(tokens, breakdown, points, images, ends)


# --------------------------------------------------------------------------------------- Gemini

#: What a PDF page costs on the Gemini wire (Google's figure), and the flat price of any other
#: media part the simulator cannot measure (a file by URI).
GEMINI_MEDIA_TOKENS = 258
#: Google takes base64 in either alphabet; the readers take the standard one.
URLSAFE = str.maketrans("-_", "+/")


def gemini_media(part: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``inlineData`` / ``fileData`` object of a part (either spelling), or None."""
    for key in ("inlineData", "inline_data", "fileData", "file_data"):
        media = part.get(key)
        if isinstance(media, Mapping):
            return media
    return None


def _video(part: Mapping[str, Any], length: float) -> int:
    """A video's tokens at the frame rate its part asks for (1 a second unless it says)."""
    meta = part.get("videoMetadata", part.get("video_metadata"))
    fps = meta.get("fps") if isinstance(meta, Mapping) else None
    return video_tokens(length, float(fps) if isinstance(fps, int | float) and fps > 0 else 1.0)


def gemini_level(value: Any) -> str | None:
    """A ``mediaResolution`` as its level's name (``MEDIA_RESOLUTION_HIGH`` → ``high``): the
    request's (``generationConfig.mediaResolution``, a string) or a part's (``{"level": ...}``)."""
    if isinstance(value, Mapping):
        value = value.get("level")
    if isinstance(value, str) and value.startswith("MEDIA_RESOLUTION_"):
        level = value.removeprefix("MEDIA_RESOLUTION_").lower()
        return None if level == "unspecified" else level
    return None


def _gemini_part(
    part: Mapping[str, Any], m: SimModel, enc: Encoder, pictures: Pictures, level: str | None
) -> tuple[list[int], int]:
    """(token ids, of which image tokens) of one part; ``level``: the request's
    media_resolution, which a part's own overrides."""
    if "text" in part:
        return ([] if part.get("thought") is True else enc.encode(_text(part["text"]))), 0
    media = gemini_media(part)
    if media is not None:
        mime = str(media.get("mimeType", media.get("mime_type", "")))
        if mime == "application/pdf" and isinstance(media.get("data"), str):
            data = str(media["data"]).translate(URLSAFE)
            return pdf_ids(data, enc, f"flat:{GEMINI_MEDIA_TOKENS}", text=False)
        if mime.startswith(("audio/", "video/")) and isinstance(media.get("data"), str):
            length = seconds(str(media["data"]).translate(URLSAFE)) or 0.0
            n = _video(part, length) if mime.startswith("video/") else length * AUDIO_SECOND
            ids = image_token_ids(digest(str(media["data"])), math.ceil(n))
            return ids, len(ids)
        if not mime.startswith("image/"):
            return specials(FILL, GEMINI_MEDIA_TOKENS), 0
        pic = pictures(part)
        detail = gemini_level(part.get("mediaResolution")) or level or "auto"
        n = image_tokens(m.image_rule or "flat:0", pic.width, pic.height, detail)
        ids = image_token_ids(pic.key, n)
        return ids, len(ids)
    for key, inner in (("functionCall", "args"), ("functionResponse", "response")):
        fn = part.get(key)
        if isinstance(fn, Mapping):
            ids = specials(CALL, m.per_tool_call) + enc.encode(_text(fn.get("name")))
            return ids + enc.encode(_compact(fn.get(inner) or {})), 0
    rest = {k: v for k, v in part.items() if k not in ("thought", "thoughtSignature")}
    return (enc.encode(_compact(rest)) if rest else []), 0


def _gemini_tools(body: Mapping[str, Any], enc: Encoder) -> list[int]:
    tokens: list[int] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        decls = tool.get("functionDeclarations", tool.get("function_declarations"))
        for item in decls if isinstance(decls, list) else [tool]:
            tokens += enc.encode(_compact(item))
    config = body.get("generationConfig", body.get("generation_config"))
    if isinstance(config, Mapping):
        for key in ("responseSchema", "responseJsonSchema", "response_schema"):
            if config.get(key) is not None:
                tokens += enc.encode(_compact(config[key]))
    return tokens


def gemini_prompt(body: Mapping[str, Any], m: SimModel, pictures: Pictures) -> Prompt:
    """The prompt of a ``generateContent`` request (``pictures`` resolves a media part)."""
    enc = get_encoder(m.tokenizer, m.token_scale, m.class_rates)
    tokens = _gemini_tools(body, enc)
    breakdown = {"tools": len(tokens)}
    images = 0
    system = body.get("systemInstruction", body.get("system_instruction"))
    contents = list(body.get("contents") or [])
    if isinstance(system, Mapping):
        contents.insert(0, system)
    elif isinstance(system, str):
        contents.insert(0, {"parts": [{"text": system}]})
    start = len(tokens)
    config = body.get("generationConfig", body.get("generation_config"))
    level = gemini_level(config.get("mediaResolution")) if isinstance(config, Mapping) else None
    for content in contents:
        tokens += specials(START, m.per_message)
        for part in content.get("parts") or []:
            ids, n = _gemini_part(part, m, enc, pictures, level)
            tokens += ids
            images += n
    tokens += specials(PRIME, m.priming)
    breakdown.update(contents=len(tokens) - start - images, images=images)
    return Prompt(tokens, breakdown, images=images)


def completion_count(m: SimModel, text: str) -> int:
    return get_encoder(m.tokenizer, m.token_scale, m.class_rates).count(text)
