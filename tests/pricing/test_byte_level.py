"""The legacy Anthropic tokenizer counted by tiktoken gives Hugging Face's counts
(pricing/byte_level.py): on generated text in many scripts, with added tokens and characters
NFKC rewrites, on every token of the vocabulary, and on a text big enough to be counted in
pieces; a file that is not exactly GPT-2's kind of BPE stays with Hugging Face."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer

from pricing import byte_level
from pricing.tokenizers import (
    _SPLIT_ABOVE,
    _HuggingFace,
    _Tiktoken,
    get_tokenizer,
    litellm_tokenizer_dir,
)

SHIPPED = litellm_tokenizer_dir() / "anthropic_tokenizer.json"

#: Characters from many scripts, ones NFKC rewrites (ligatures, full-width forms, circled digits,
#: compatibility signs, combining marks), whitespace of several kinds and the file's added tokens.
PIECES = st.one_of(
    st.characters(codec="utf-8", exclude_categories=("Cs",)),
    st.sampled_from(
        [
            "ﬁ", "ﬀ", "Ａ", "１", "①", "Ω", "Å", "ẛ", "\u0301", "\u0308", "\u200b", "\ufeff",
            "e\u0301", "\u3000", " ", "  ", "\n", "\t", "\r\n", "'s", "'ll", " 123", "0000",
            "<EOT>", "<META>", "<META_START>", "<META_END>", "<SOS>", "<EO", "T>", "Ｅ",
            "naïve", "日本語", "한국어", "Ελληνικά", "русский", "😀", "👍🏽",
        ]
    ),
)  # fmt: skip


@cache
def _hf() -> Any:
    return HFTokenizer.from_file(str(SHIPPED))


def _hf_count(text: str) -> int:
    return len(_hf().encode(text, add_special_tokens=False).ids)


def test_the_shipped_file_is_counted_by_tiktoken():
    tok = get_tokenizer("anthropic-legacy")
    assert isinstance(tok, _Tiktoken) and tok.bpe is not None
    assert tok.bpe.nfkc and tok.bpe.specials is not None


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=60).map("".join))
def test_counts_are_hugging_face_s(text):
    bpe = get_tokenizer("anthropic-legacy").bpe
    assert bpe is not None
    assert bpe.count(text) == _hf_count(text)


def test_every_token_of_the_vocabulary_counts_as_hugging_face_counts_it():
    spec = json.loads(SHIPPED.read_text(encoding="utf-8"))
    decoder = byte_level._byte_decoder()
    texts = []
    for token in spec["model"]["vocab"]:
        try:
            texts.append(bytes(decoder[c] for c in token).decode("utf-8"))
        except (KeyError, UnicodeDecodeError):
            continue
    assert len(texts) > 60_000
    bpe = get_tokenizer("anthropic-legacy").bpe
    assert bpe is not None
    theirs = [len(e.ids) for e in _hf().encode_batch(texts, add_special_tokens=False)]
    ours = [bpe.count(t) for t in texts]
    assert ours == theirs
    # and after a space, as words stand in running text
    spaced = [" " + t for t in texts[::7]]
    theirs = [len(e.ids) for e in _hf().encode_batch(spaced, add_special_tokens=False)]
    assert [bpe.count(t) for t in spaced] == theirs


def test_a_big_text_counted_in_pieces_is_counted_whole():
    text = (Path(__file__).read_text(encoding="utf-8") + " ﬁ Ｅ① naïve <EOT> ") * 40
    assert len(text) > _SPLIT_ABOVE
    tok = get_tokenizer("anthropic-legacy", scope=b"test-big-text")
    assert tok.count(text) == _hf_count(text)


def test_token_starts_of_plain_text_are_hugging_face_s():
    tok = get_tokenizer("anthropic-legacy")
    reference = _HuggingFace("reference", _hf())
    for text in ("def count(self, text: str) -> int:\n    return 0", "Hello, world! 12345 naïve"):
        assert tok.boundaries(text) == reference.boundaries(text)
    # Rewritten by NFKC: every start given is where a piece of the raw text starts.
    starts = tok.boundaries("ﬁne ﬁles, Ｅvery day")
    assert starts[0] == 0 and starts == sorted(starts) and 3 in starts  # " ﬁles" starts at 3


def _variant(tmp_path: Path, change: Any) -> Path:
    spec = json.loads(SHIPPED.read_text(encoding="utf-8"))
    change(spec)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def _set(key: str, value: Any) -> Any:
    def change(spec: dict) -> None:
        spec[key] = value

    return change


def _model(key: str, value: Any) -> Any:
    def change(spec: dict) -> None:
        spec["model"][key] = value

    return change


def _duplicate_merge(spec: dict) -> None:
    spec["model"]["merges"].append(spec["model"]["merges"][0])


def _normalised_added(spec: dict) -> None:
    spec["added_tokens"][0]["normalized"] = True


@pytest.mark.parametrize(
    "change",
    [
        _set("normalizer", {"type": "NFC"}),
        _set("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": True}),
        _set("pre_tokenizer", {"type": "Whitespace"}),
        _model("dropout", 0.1),
        _model("continuing_subword_prefix", "##"),
        _model("type", "WordPiece"),
        _duplicate_merge,
        _normalised_added,
    ],
)
def test_a_file_that_is_not_exactly_a_byte_level_bpe_stays_with_hugging_face(tmp_path, change):
    assert byte_level.load(_variant(tmp_path, change), "variant") is None


def test_an_operator_s_byte_level_file_is_counted_by_tiktoken_too(tmp_path):
    path = _variant(tmp_path, lambda spec: None)
    tok = get_tokenizer(f"hf:{path}")
    assert isinstance(tok, _Tiktoken) and tok.bpe is not None
    text = "An operator's file: ﬁve <META> tokens, 42 of them."
    assert tok.count(text) == _hf_count(text)
