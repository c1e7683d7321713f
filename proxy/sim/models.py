"""Simulated models: what each one counts, how big its window is, which wire it speaks."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["BUILTIN_MODELS", "SimModel", "builtin_models", "get_builtin", "small_variant"]

Wire = Literal["openai", "anthropic", "gemini"]
ChatFormat = Literal["openai", "deepseek", "anthropic", "gemini"]


@dataclass(frozen=True)
class SimModel:
    """One simulated model. Everything the simulator treats as "the provider's truth".

    ``tokenizer`` / ``token_scale``: how text is tokenized (``token_scale > 1`` models a tokenizer
    routefit does not know: every text costs ``ceil(count × scale)``).
    ``chat_format``: how a request is rendered into tokens (see docs/simulator.md):
    ``openai`` (cookbook rule: ``per_message`` + role + fields, ``per_name`` for a name,
    ``priming``; the function-schema rule for tools), ``deepseek`` (V3 chat template rendered as
    one string, tokenized once), ``anthropic`` (fixed per-message overhead, tool-use system prompt),
    ``gemini`` (per-content overhead, declarations as compact JSON).
    ``image_rule``: ``None`` = text-only (images are rejected with 400), else a rule name for
    :func:`proxy.sim.images.image_tokens`.
    """

    name: str
    wire: Wire = "openai"
    context_window: int = 128_000
    max_output: int = 16_384
    tokenizer: str = "o200k_base"
    token_scale: float = 1.0
    #: Rates per token class (``"word=1.06,punct=1.35,digit=0,script=0.8,space=1.6"``): a
    #: tokenizer whose ratio to its base varies by content (``proxy.sim.tokens._ByClass``).
    class_rates: str = ""
    chat_format: ChatFormat = "openai"
    per_message: int = 3
    per_name: int = 1
    priming: int = 3
    #: Scaffolding of one assistant tool call / Anthropic tool_use or tool_result block.
    per_tool_call: int = 3
    # OpenAI cookbook function-schema constants (gpt-4 / gpt-3.5: func_init=10).
    func_init: int = 7
    prop_init: int = 3
    prop_key: int = 3
    enum_init: int = -3
    enum_item: int = 3
    func_end: int = 12
    #: Anthropic: the tool-use system prompt added when tools are present (tool_choice auto/none)
    tool_system_tokens: int = 0
    #: ... and when tool_choice is ``any`` or ``tool``.
    tool_system_tokens_forced: int = 0
    image_rule: str | None = "openai-tile"
    #: Takes chat ``input_audio`` parts (wav or mp3), counted as OpenAI counts user audio: a
    #: token per 100 ms; a model without it refuses them, as gpt-4o does.
    audio_input: bool = False
    cache_block: int = 128
    cache_min: int = 1024
    #: Natural completion length (tokens) before ``max_tokens`` cuts it; varied ±50% per prompt.
    completion_tokens: int = 16
    owned_by: str = "routefit-sim"
    #: Other names the model answers to (e.g. a real model name litellm has in its cost map).
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.wire not in ("openai", "anthropic", "gemini"):
            raise ValueError(f"sim model {self.name}: unknown wire {self.wire!r}")
        if self.chat_format not in ("openai", "deepseek", "anthropic", "gemini"):
            raise ValueError(f"sim model {self.name}: unknown chat_format {self.chat_format!r}")
        for own in ("anthropic", "gemini"):
            if (self.wire == own) != (self.chat_format == own):
                raise ValueError(f"sim model {self.name}: the {own} wire needs {own} framing")
        if self.context_window < 1 or self.max_output < 1:
            raise ValueError(f"sim model {self.name}: window and max_output must be positive")

    @property
    def deepseek_usage(self) -> bool:
        """DeepSeek reports ``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``."""
        return self.chat_format == "deepseek"


def small_variant(model: SimModel, window: int = 8192, max_output: int = 4096) -> SimModel:
    """The same model with a small window, so overflow is easy to trigger."""
    return replace(
        model,
        name=f"{model.name}-small",
        context_window=window,
        max_output=min(model.max_output, max_output),
        aliases=(),
    )


_GPT_4O = SimModel("gpt-4o", context_window=128_000, max_output=16_384)
_GPT_4O_MINI = SimModel(
    "gpt-4o-mini", context_window=128_000, max_output=16_384, image_rule="openai-tile:2833/5667"
)
#: An OpenAI audio model (gpt-audio: audio and text in, no images).
_GPT_AUDIO = SimModel("gpt-audio-sim", image_rule=None, audio_input=True, aliases=("gpt-audio",))
_GPT_4 = SimModel(
    "gpt-4",
    context_window=8192,
    max_output=8192,
    tokenizer="cl100k_base",
    func_init=10,
    image_rule=None,
)
_DEEPSEEK = SimModel(
    "deepseek-chat",
    context_window=65_536,
    max_output=8192,
    tokenizer="deepseek",
    chat_format="deepseek",
    per_message=0,
    per_name=0,
    priming=0,
    per_tool_call=0,
    image_rule=None,
    cache_block=64,
    cache_min=64,
    owned_by="deepseek",
)
_MYSTERY = SimModel(
    "mystery-1",
    context_window=32_768,
    max_output=4096,
    token_scale=1.11,
    per_message=6,
    image_rule="openai-tile",
    owned_by="mystery-labs",
)
#: Harder unknown tokenizers: their ratio to every tokenizer routefit ships varies by content
#: class, and they add their own per-message and per-tool-call scaffolding.
_MYSTERY_2 = SimModel(
    "mystery-2",
    context_window=32_768,
    max_output=4096,
    class_rates="word=1.06,punct=1.35,digit=0,script=0.8,space=1.6",
    per_message=7,
    per_tool_call=9,
    image_rule="openai-tile",
    owned_by="mystery-labs",
)
_MYSTERY_3 = SimModel(
    "mystery-3",
    context_window=32_768,
    max_output=4096,
    tokenizer="cl100k_base",
    class_rates="word=1.0,punct=1.2,script=1.5,space=0.5",
    per_message=5,
    per_name=2,
    priming=5,
    per_tool_call=12,
    image_rule="openai-tile",
    owned_by="mystery-labs",
)
#: Tokenizers that count far more than any estimate routefit can make before it has learnt the
#: route (half again over what it ships, six tokens a message), behind a small window: the first
#: long request overflows at the provider, whose error states its count (the overflow refit).
_MYSTERY_DENSE = SimModel(
    "mystery-dense",
    context_window=8192,
    max_output=2048,
    token_scale=1.5,
    per_message=6,
    image_rule="openai-tile",
    owned_by="mystery-labs",
)
_CLAUDE_DENSE = SimModel(
    "claude-dense",
    wire="anthropic",
    context_window=8192,
    max_output=2048,
    tokenizer="anthropic-legacy",
    token_scale=1.5,
    chat_format="anthropic",
    per_message=6,
    per_name=0,
    priming=3,
    per_tool_call=6,
    tool_system_tokens=346,
    tool_system_tokens_forced=313,
    image_rule="anthropic",
    owned_by="anthropic",
)
_CLAUDE = SimModel(
    "claude-sim",
    wire="anthropic",
    context_window=200_000,
    max_output=64_000,
    tokenizer="anthropic-legacy",
    chat_format="anthropic",
    per_message=4,
    per_name=0,
    priming=3,
    per_tool_call=6,
    tool_system_tokens=346,
    tool_system_tokens_forced=313,
    image_rule="anthropic",
    owned_by="anthropic",
    aliases=("claude-sonnet-4-5",),
)

#: Gemini (the generateContent wire): Google publishes no tokenizer, so the stand-in is cl100k,
#: a vocabulary other than the o200k routefit assumes for an unknown model (the difference,
#: content-dependent, is calibration's to learn; a scaled or per-class encoder would cost tens
#: to hundreds of ms per agent prompt), a small per-content overhead, and the image rule Google
#: publishes: ``gemini-tile`` on 2.x, 1,120 per image on Gemini 3 (docs/images.md).
_GEMINI = SimModel(
    "gemini-sim",
    wire="gemini",
    context_window=1_048_576,
    max_output=65_536,
    tokenizer="cl100k_base",
    chat_format="gemini",
    per_message=3,
    per_name=0,
    priming=2,
    per_tool_call=4,
    image_rule="gemini-tile",
    cache_block=256,
    cache_min=1024,
    owned_by="google",
    aliases=("gemini-2.5-flash",),
)
_GEMINI_3 = replace(
    _GEMINI, name="gemini-3-sim", image_rule="gemini-levels:280/560/1120/2240", aliases=()
)

BUILTIN_MODELS: dict[str, SimModel] = {
    m.name: m
    for m in (
        _GPT_4O,
        _GPT_4O_MINI,
        _GPT_AUDIO,
        _GPT_4,
        _DEEPSEEK,
        _MYSTERY,
        _MYSTERY_2,
        _MYSTERY_3,
        _MYSTERY_DENSE,
        _CLAUDE,
        _CLAUDE_DENSE,
        _GEMINI,
        _GEMINI_3,
        small_variant(_GPT_4O),
        small_variant(_DEEPSEEK),
        small_variant(_MYSTERY),
        small_variant(_CLAUDE),
        small_variant(_GEMINI),
    )
}


def builtin_models() -> list[SimModel]:
    return list(BUILTIN_MODELS.values())


def get_builtin(name: str) -> SimModel:
    try:
        return BUILTIN_MODELS[name]
    except KeyError:
        raise KeyError(
            f"no built-in sim model {name!r} (known: {', '.join(BUILTIN_MODELS)})"
        ) from None
