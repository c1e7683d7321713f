"""Deterministic completions: the same prompt always gets the same answer.

Text is a run of common words chosen by a hash of (model, last user text), as long as the model's
natural length for that prompt (``completion_tokens`` ±50%), cut to ``max_tokens`` (then the
finish reason is ``length``). Tool calls are made when tools are offered and either the last
message is a user message containing ``call:NAME`` (several allowed, comma- or space-separated)
or the tool choice forces one; their ids and arguments derive from the same hash.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.sim.models import SimModel
from proxy.sim.tokens import Encoder, get_encoder

__all__ = ["Answer", "ToolCallOut", "answer"]

_PHRASE = (
    "the quick brown fox jumps over a lazy dog while seven small birds sing about the river "
    "and clouds drift past old towers near green fields where people walk slowly home after "
    "long days of work in warm light under blue sky"
)
WORDS = _PHRASE.split()
_CALL = re.compile(r"\bcall:([A-Za-z0-9_-]+(?:,[A-Za-z0-9_-]+)*)")


@dataclass(frozen=True)
class ToolCallOut:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class Answer:
    text: str
    tool_calls: tuple[ToolCallOut, ...]
    completion_tokens: int
    finish: str  # stop | length | tool_calls


def seed_of(model: str, last_user: str) -> str:
    return hashlib.sha256(f"{model}\x00{last_user}".encode("utf-8", "surrogatepass")).hexdigest()


def _encoder(model: SimModel) -> Encoder:
    """The model's own tokenizer, as its prompts are counted (``counting.completion_count``):
    without its class rates, an answer's ``completion_tokens`` were the base tokenizer's, not
    what the same model counts for that text when it comes back in the next prompt."""
    return get_encoder(model.tokenizer, model.token_scale, model.class_rates)


def _text_of_length(model: SimModel, seed: str, n: int) -> tuple[str, int]:
    """Words from the seed with at most ``n`` tokens (and as many as fit)."""
    enc = _encoder(model)
    if n <= 0:
        return "", 0
    rng = random.Random(int(seed[:16], 16))
    words = [rng.choice(WORDS) for _ in range(n)]
    words[0] = words[0].capitalize()
    text = " ".join(words)
    count = enc.count(text)
    while count > n and words:
        words.pop()
        text = " ".join(words)
        count = enc.count(text)
    return text, count


def example_value(schema: Any, key: str, seed: str) -> Any:
    """A value that satisfies a (simple) JSON schema, derived from the seed."""
    if not isinstance(schema, Mapping):
        return f"{key}-{seed[:6]}"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return int(seed[:2], 16) % 10 + 1
    if kind == "number":
        return (int(seed[:2], 16) % 100) / 10
    if kind == "boolean":
        return int(seed[:1], 16) % 2 == 0
    if kind == "array":
        return [example_value(schema.get("items"), key, seed)]
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        return {k: example_value(v, k, seed) for k, v in props.items()}
    return f"{key}-{seed[:6]}"


def answer(
    model: SimModel,
    *,
    last_user: str,
    tools: Sequence[tuple[str, Mapping[str, Any]]],
    forced: str | None,
    wants_call: bool,
    max_tokens: int | None,
    room: int,
    id_prefix: str = "call_",
    schema: Mapping[str, Any] | None = None,
) -> Answer:
    """The completion for a prompt.

    ``tools``: (name, JSON schema of the arguments) offered; ``forced``: a tool name the tool
    choice forces, ``"*"`` for "any tool" (the first one, or the ones the marker names);
    ``wants_call``: whether the last message is a user turn (only then does a marker call).
    ``room``: tokens the window has left for the completion. ``schema``: a structured output's
    JSON schema (chat's ``response_format``): the text is a value satisfying it.
    """
    seed = seed_of(model.name, last_user)
    names = [n for n, _ in tools]
    wanted: list[str] = []
    if tools and wants_call:
        for m in _CALL.finditer(last_user):
            wanted += [n for n in m.group(1).split(",") if n in names]
    if forced == "*" and not wanted and names:
        wanted = [names[0]]
    elif forced not in (None, "*"):
        wanted = [forced] if forced in names else []
    if wanted:
        schemas = dict(tools)
        calls = []
        for i, name in enumerate(wanted):
            call_seed = hashlib.sha256(f"{seed}:{i}:{name}".encode()).hexdigest()
            args = example_value(schemas.get(name) or {"type": "object"}, name, call_seed)
            if not isinstance(args, dict):
                args = {}
            calls.append(ToolCallOut(f"{id_prefix}{call_seed[:24]}", name, json.dumps(args)))
        enc = _encoder(model)
        used = sum(model.per_tool_call + enc.count(c.name) + enc.count(c.arguments) for c in calls)
        return Answer("", tuple(calls), used, "tool_calls")
    if schema is not None:
        text = json.dumps(example_value(schema, "response", seed))
        return Answer(text, (), _encoder(model).count(text), "stop")
    natural = max(1, round(model.completion_tokens * (0.5 + int(seed[8:12], 16) / 0xFFFF)))
    limit = min(natural, room, max_tokens if max_tokens is not None else natural)
    text, count = _text_of_length(model, seed, limit)
    finish = "length" if limit < natural else "stop"
    return Answer(text, (), count, finish)
