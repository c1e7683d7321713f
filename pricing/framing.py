"""Chat framing: what a route adds around the text of each message, per chat family.

A model never sees the JSON of a chat request; it sees the request rendered through its chat
template: role markers, separators, tool schemas, the priming of its reply. Those tokens are
billed and they count against the window, so they are priced here, per family:

``openai``
    OpenAI's published rule (cookbook, "How to count tokens with tiktoken"): 3 tokens per message
    plus its role and fields, 1 more for a ``name``, 3 to prime the reply; tool definitions by the
    cookbook's function-schema rule. Exact for plain text on gpt-4o-class models. Assistant tool
    calls and tool results are priced as their text plus a per-call constant: OpenAI does not
    publish that rendering, so it is an approximation that calibration corrects.
``deepseek``
    DeepSeek's V3-family chat template: ``<｜begin▁of▁sentence｜>``, ``<｜User｜>`` /
    ``<｜Assistant｜>`` role markers, ``<｜end▁of▁sentence｜>`` after assistant turns, and its
    tool-call and tool-output markers. Each marker is one special token, so the template is priced
    exactly with the DeepSeek tokenizer by counting the text between markers.
``generic``
    Constants from config, for families whose templates are not public (Claude, Gemini, ...).

A message's lead (``Message.lead``: the words a translation to chat writes before its text, for a
field the client's wire has and chat has not) is priced here too, on a translated leg only
(``frame_message``'s ``translated``): text outside the content, like a call's name, where the
meter, the bounds and the capper all take the frame, so none of them can leave it out.

Only framing lives here; counting text is the tokenizer's job and images are the image rule's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pricing.messages import ANSWER, Message, ToolCall, lead_text
from pricing.tokenizers import Tokenizer

__all__ = ["FAMILIES", "Framing", "MessageFrame", "default_framing", "parse_framing"]

FAMILIES = ("openai", "deepseek", "generic")


@dataclass(frozen=True, slots=True)
class Framing:
    """A chat family and its constants (overridable from config: providers revise them)."""

    family: str = "openai"
    per_message: int = 3
    per_name: int = 1
    priming: int = 3
    #: Scaffolding around one assistant tool call, beyond its name and arguments (approximate).
    per_tool_call: int = 7
    # OpenAI's function-schema rule (cookbook); gpt-4 / gpt-3.5 use func_init=10.
    func_init: int = 7
    prop_init: int = 3
    prop_key: int = 3
    enum_init: int = -3
    enum_item: int = 3
    func_end: int = 12
    #: A system prompt the provider adds once when a request carries tools (Anthropic's
    #: tool-use preamble); 0 for families that publish none.
    tools_preamble: int = 0

    #: Whether the family's rendering is published exactly (the meter reports it).
    @property
    def exact(self) -> bool:
        return self.family in ("openai", "deepseek")


@dataclass(frozen=True, slots=True)
class MessageFrame:
    """Tokens of one message beyond its content parts: ``text`` is model-visible text outside
    the content (tool-call names and arguments), ``framing`` the template's scaffolding."""

    text: int
    framing: int


#: Anthropic's published size of the system prompt it adds when a request carries tools
#: (Claude 4.x: 346 tokens for tool_choice auto/none, 313 for any/tool; the larger is used).
CLAUDE_TOOLS_PREAMBLE = 346


def default_framing(model: str, tokenizer: str, provider: str | None = None) -> Framing:
    """The framing a model name (and its litellm provider) implies; config may override any
    constant. A model served by OpenAI itself (``openai/...``) is framed the OpenAI way whatever
    its name."""
    name = model.lower().rsplit("/", 1)[-1]
    if "deepseek" in name and tokenizer == "deepseek":
        return Framing(family="deepseek", per_message=0, per_name=0, priming=2)
    if tokenizer == "cl100k_base":
        return Framing(func_init=10)
    if is_openai_model(name) or provider == "openai":
        return Framing()
    if name.startswith("claude"):
        return Framing(family="generic", tools_preamble=CLAUDE_TOOLS_PREAMBLE)
    return Framing(family="generic")


def is_openai_model(model: str) -> bool:
    """Whether a model name is one of OpenAI's own (whose counting rules are published)."""
    name = model.lower().rsplit("/", 1)[-1]
    return name.startswith(("gpt-", "o1", "o3", "o4", "chatgpt", "computer-use"))


def parse_framing(spec: Any, base: Framing) -> Framing:
    """``framing: openai`` or ``framing: {family: generic, per_message: 5, ...}``."""
    if isinstance(spec, str):
        spec = {"family": spec}
    if not isinstance(spec, Mapping):
        raise ValueError("framing must be a family name or a mapping")
    family = spec.get("family", base.family)
    if family not in FAMILIES:
        raise ValueError(f"unknown framing family {family!r} (known: {', '.join(FAMILIES)})")
    fields = {k: v for k, v in spec.items() if k != "family"}
    known = set(Framing.__dataclass_fields__) - {"family"}
    unknown = set(fields) - known
    if unknown:
        raise ValueError(f"unknown framing constant(s) {sorted(unknown)} (known: {sorted(known)})")
    for key, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"framing.{key} must be an integer")
    if family != base.family and family == "deepseek":
        base = Framing(family="deepseek", per_message=0, per_name=0, priming=2)
    return replace(base, family=family, **fields)


def frame_message(
    message: Message,
    framing: Framing,
    tok: Tokenizer,
    prev_role: str | None = None,
    *,
    translated: bool = False,
) -> MessageFrame:
    """Tokens a message costs beyond its content parts.

    ``prev_role`` (the role of the message before it) matters only to templates that join
    consecutive tool outputs, like DeepSeek's. ``translated``: the message goes on a leg its
    client's wire translates to chat (``Route.translated``), where its lead (``Message.lead``,
    written by ``pricing.messages.lead_text``'s rule) is sent before its text: model-visible
    text outside the content, priced here so that the meter, the bounds (``pricing.bounds``) and
    the capper (``pricing.capped``, whose cut leaves room for it) all price it alike.
    """
    frame = _frame(message, framing, tok, prev_role)
    lead = lead_text(message) if translated else ""
    if not lead:
        return frame
    return MessageFrame(frame.text + tok.count(lead), frame.framing)


def _frame(
    message: Message, framing: Framing, tok: Tokenizer, prev_role: str | None
) -> MessageFrame:
    if framing.family == "deepseek":
        return _deepseek_frame(message, tok, prev_role)
    text = sum(tok.count(c.name) + tok.count(c.arguments) for c in message.tool_calls)
    overhead = framing.per_message + tok.count(message.role)
    if message.name is not None:
        overhead += tok.count(message.name) + framing.per_name
    overhead += framing.per_tool_call * len(message.tool_calls)
    if message.tool_call_id is not None:
        overhead += tok.count(message.tool_call_id)
    return MessageFrame(text=text, framing=overhead)


_TOOL_ROLES = ("tool", "function")


def _deepseek_frame(message: Message, tok: Tokenizer, prev_role: str | None) -> MessageFrame:
    """DeepSeek's V3 chat template, priced exactly.

    Each marker is one special token and splits the text around it, so counting the text between
    markers is exact. A run of tool outputs opens with ``<｜tool▁outputs▁begin｜>``, joins outputs
    with a newline and is closed by ``<｜tool▁outputs▁end｜>``, which takes the place of the next
    assistant turn's ``<｜Assistant｜>`` (or of the generation prompt) and is charged to a user
    message that follows a run. Several system messages are joined by a blank line that may
    merge with the text around it; one system message is exact.
    """
    role = message.role
    after_tools = prev_role in _TOOL_ROLES
    if role in ("system", "developer"):
        return MessageFrame(0, 0)  # system text follows BOS with no marker
    if role == "user":
        return MessageFrame(0, 2 if after_tools else 1)  # [outputs-end] <｜User｜>
    if role in _TOOL_ROLES:
        if after_tools:  # "\n" <｜tool▁output▁begin｜> ... <｜tool▁output▁end｜>
            return MessageFrame(0, tok.count("\n") + 2)
        return MessageFrame(0, 3)  # outputs-begin, output-begin, ..., output-end
    # <｜Assistant｜> (or outputs-end) content [calls-begin call ("\n" call)* calls-end] EOS
    framing = 2
    text = 0
    if message.tool_calls:
        framing += 2
        for i, call in enumerate(message.tool_calls):
            # <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
            framing += 3 + tok.count("function") + (tok.count("\n") if i else 0)
            text += tok.count(deepseek_call_text(call))
    return MessageFrame(text, framing)


def deepseek_call_text(call: ToolCall) -> str:
    """The text of one tool call between DeepSeek's ``<｜tool▁sep｜>`` and its end marker."""
    return f"{call.name}\n```json\n{call.arguments}\n```"


def tools_tokens(tools: tuple[Mapping[str, Any], ...], framing: Framing, tok: Tokenizer) -> int:
    """Tokens of the tool definitions of a request."""
    if not tools:
        return 0
    # the tool-use preamble comes with tools, not with a JSON answer's schema alone
    # (``pricing.messages.answer_schema``: an entry among the tools, for pricing only)
    preamble = framing.tools_preamble if any(fn.get("type") != ANSWER for fn in tools) else 0
    if framing.family == "openai":
        return _openai_tools(tools, framing, tok) + preamble
    # Other families render the schemas as JSON inside their system prompt; price that text.
    schemas = sum(tok.count(_compact_json(fn)) + framing.per_message for fn in tools)
    return schemas + preamble


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _strip_period(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


def _openai_tools(tools: tuple[Mapping[str, Any], ...], f: Framing, tok: Tokenizer) -> int:
    total = 0
    for fn in tools:
        name = fn.get("name")
        if not isinstance(name, str):  # a non-function tool kind: its JSON is the best guess
            total += tok.count(_compact_json(fn))
            continue
        description = fn.get("description")
        total += f.func_init + tok.count(f"{name}:{_strip_period(_as_text(description))}")
        params = fn.get("parameters")
        if not isinstance(params, Mapping):
            continue
        properties = params.get("properties")
        if isinstance(properties, Mapping) and properties:
            total += f.prop_init + _openai_properties(properties, f, tok)
        total += _beyond_cookbook(params, _COOKBOOK_PARAMETERS, tok)
    return total + f.func_end


def _openai_properties(properties: Mapping[str, Any], f: Framing, tok: Tokenizer) -> int:
    total = 0
    for key, prop in properties.items():
        prop = prop if isinstance(prop, Mapping) else {}
        total += f.prop_key
        enum = prop.get("enum")
        if isinstance(enum, list):
            total += f.enum_init
            for item in enum:
                total += f.enum_item + tok.count(_as_text(item))
        kind = prop.get("type", "")
        kind = "|".join(map(str, kind)) if isinstance(kind, list) else _as_text(kind)
        description = _strip_period(_as_text(prop.get("description")))
        total += tok.count(f"{key}:{kind}:{description}")
        total += _beyond_cookbook(prop, _COOKBOOK_PROPERTY, tok)
    return total


#: What the cookbook's rule prices of a property's schema ...
_COOKBOOK_PROPERTY = frozenset({"type", "description", "enum"})
#: ... and of a function's parameters (``required`` is its ``?`` marker, which costs nothing).
_COOKBOOK_PARAMETERS = frozenset({"type", "properties", "required"})


def _beyond_cookbook(schema: Mapping[str, Any], priced: frozenset[str], tok: Tokenizer) -> int:
    """The rest of a schema, which the cookbook's rule does not cover, as its compact JSON.

    The cookbook stops at the top level and at a property's type, description and enum. What
    else a schema says -- an object's nested properties, an array's items, a union
    (``anyOf``/``oneOf``), the definitions a ``$ref`` points at (``$defs``, as Pydantic writes
    every nested model), defaults, bounds, formats -- reaches the model too, in a rendering
    OpenAI does not publish. Its compact JSON spells out every key and value, above any
    rendering of it: conservative where the rule is unknown, and calibration brings it down.
    Priced one level down by the cookbook's own rule, Codex CLI's tools came to 147 tokens
    under the simulator's count of them; with only nested properties and items priced, a
    Pydantic schema's ``$defs`` and optional fields (``anyOf`` with null) were priced at
    nothing (tests/pricing/test_tool_schemas.py)."""
    rest = {k: v for k, v in schema.items() if k not in priced}
    if not rest:
        return 0
    return tok.count(json.dumps(rest, ensure_ascii=False, separators=(",", ":")))


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
