"""What the tenth fresh sample of pricing/'s mutants (120 mutants, seed 20261230,
docs/mutation.md) let through: a merge of a piece that is no byte string crashing the
byte-level check, the ranks' Python copy kept in memory, a calibration sample decoded from JSON,
the model's framing family lost when config overrides one constant, DeepSeek V4's smallest
budget and its largest grid, a JSON object whose cut repeats a key, an element kept in part
given more than what is left of its share, ``n: 1`` refused and a bad string value not shown, a
sized image priced by its provider's rule counted as defaulted, an unloadable tokenizer file
not named, gpt-4.5 counted with cl100k, and a Hugging Face file's special tokens counted as
text. The survivors judged equivalent (or left) are named in their module's section."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, processors

from pricing import byte_level
from pricing.calibration import FEATURES, Sample
from pricing.framing import FAMILIES, default_framing, parse_framing
from pricing.images import default_image_rule
from pricing.images.rule import ImageRule
from pricing.images.spec import parse_image_rule
from pricing.jsoncut import _Planner, detect_style, parse
from pricing.messages import RequestError, parse_request
from pricing.meter import measure
from pricing.route import Route
from pricing.tokenizers import (
    TokenizerError,
    _HuggingFace,
    _Tiktoken,
    count_each,
    default_tokenizer,
    get_tokenizer,
)

# -- pricing/bounds.py (_with_tokens mutmut_25: equivalent, see the report) --------------------
# -- pricing/byte_level.py (_ranks mutmut_28, load mutmut_47) ----------------------------------


def _byte_level_file(path: Path, merge: str, *pieces: str) -> Path:
    """A byte-level BPE ``tokenizer.json`` (GPT-2's recipe) whose vocabulary is the 256 byte
    stand-ins, ``pieces`` and the token of its one merge."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    assert len(alphabet) == 256
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for piece in (*pieces, merge.replace(" ", "")):
        vocab[piece] = len(vocab)
    spec: dict[str, object] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "post_processor": None,
        "decoder": None,
        "model": {"type": "BPE", "vocab": vocab, "merges": [merge]},
    }
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


@pytest.mark.parametrize("merge", ["Ő a", "a Ő"])
def test_a_merge_of_a_piece_that_is_no_byte_string_leaves_the_file_with_hugging_face(
    tmp_path: Path, merge: str
) -> None:
    """``byte_level``: "any other file ... stays with Hugging Face". A merge with either side
    outside the byte alphabet is not GPT-2's kind of BPE: ``load`` says so (None) rather than
    failing, and the tokenizer counts with Hugging Face's library; no merge applies to ASCII
    text, so each byte is a token."""
    assert "Ő" not in pre_tokenizers.ByteLevel.alphabet()
    path = _byte_level_file(tmp_path / "tokenizer.json", merge, "Ő")
    assert byte_level.load(path, "odd") is None
    tok = get_tokenizer(f"hf:{path}")
    assert isinstance(tok, _HuggingFace)
    assert tok.count("hello") == len(b"hello")


def test_a_byte_level_file_keeps_no_python_copy_of_its_ranks(tmp_path: Path) -> None:
    """``byte_level.load``: "as for the shipped tiktoken files: the Python copy of the ranks is
    only for pickling" — routefit never pickles an encoding, so the copy goes (the Rust core
    keeps its own and counts with it: "ab" is the one merge's token)."""
    path = _byte_level_file(tmp_path / "tokenizer.json", "a b")
    loaded = byte_level.load(path, "tiny")
    assert loaded is not None
    assert not hasattr(loaded.encoding, "_mergeable_ranks")
    assert loaded.count("abc") == 2
    tok = get_tokenizer(f"hf:{path}")
    assert isinstance(tok, _Tiktoken) and tok.bpe is not None
    assert not hasattr(tok._enc, "_mergeable_ranks")


# -- pricing/calibration.py (Sample.__post_init__ mutmut_3; checkpoint_anchors mutmut_20: left,
#    see the report) ---------------------------------------------------------------------------


def test_a_sample_decoded_from_json_has_its_features_as_a_tuple() -> None:
    """The store decodes a sample's features as a JSON list; the sample keeps them as the tuple
    that ``vector`` and the fit read, as an anchor does."""
    features = [7] * len(FEATURES)
    sample = Sample("r", 1.0, 7, 0, 0, 0, 1, 7, False, 9, 0, features)  # type: ignore[arg-type]
    assert sample.features == tuple(features)
    assert isinstance(sample.features, tuple)
    assert sample.vector == tuple(features)


# -- pricing/framing.py (default_framing mutmut_51; _compact_json mutmut_2: equivalent) --------


def test_an_unknown_models_framing_is_generic_and_config_may_tune_one_constant() -> None:
    """docs/configuration.md: a framing mapping overrides the family's constants, and its
    ``family`` defaults to the one "from the model". A model of no family routefit knows is
    framed ``generic``, one of the known ``FAMILIES``, so an operator can set one constant
    without naming the family again."""
    base = default_framing("mistral/mistral-large-latest", "o200k_base", "mistral")
    assert base.family == "generic"
    assert base.family in FAMILIES
    tuned = parse_framing({"per_message": 5}, base)
    assert (tuned.family, tuned.per_message) == ("generic", 5)
    assert not tuned.exact


# -- pricing/images/kinds.py (DeepSeekV4.__post_init__ mutmut_3, DeepSeekV4._solve mutmut_16;
#    DeepSeekV4._pass mutmut_3 and OpenAITile._resized mutmut_16: equivalent) ------------------


@pytest.mark.parametrize("pad_to", [2, 4, 7])
def test_deepseek_v4_refuses_a_budget_under_eight_tokens_plus_its_pad(pad_to: int) -> None:
    """The pad (``pad_to - 1``, exp's worst case) is paid out of ``max_tokens`` (docs/images.md:
    exp's 384 leave a budget of 381), so the rule asks for ``max_tokens >= 8 + pad``, as its
    message says: one token under is refused, exactly that much is a rule."""
    pad = pad_to - 1
    with pytest.raises(ValueError, match=r"max_tokens >= 8 \+ pad"):
        parse_image_rule({"kind": "deepseek-v4", "max_tokens": 8 + pad - 1, "pad_to": pad_to})
    rule = parse_image_rule({"kind": "deepseek-v4", "max_tokens": 8 + pad, "pad_to": pad_to})
    assert dict(rule.params)["max_tokens"] == 8 + pad


def _largest_square_grid(budget: int) -> int:
    """docs/images.md § DeepSeek V4: a grid of gw x gh cells costs gh·(gw+1)+2 tokens; the
    dearest square one within ``budget``."""
    return max(c * (c + 1) + 2 for c in range(1, budget) if c * (c + 1) + 2 <= budget)


@pytest.mark.parametrize("cells", [14, 17, 20, 25, 31])
@pytest.mark.parametrize("side", [3000, 5000])
def test_deepseek_v4_prices_a_big_square_at_the_largest_square_grid_within_budget(
    cells: int, side: int
) -> None:
    """Over budget, V4 "solves the largest aspect-preserving grid": for a square image, the
    largest c x c grid whose c·(c+1)+2 tokens fit. With a budget of exactly that many tokens
    the grid fits with none to spare, so the image costs the whole budget (c ≥ 13 keeps the
    solved image above V4.1's 544² minimum, so no pass scales it up again)."""
    budget = cells * (cells + 1) + 2
    rule = parse_image_rule({"kind": "deepseek-v4", "max_tokens": budget})
    assert rule.tokens(side, side) == _largest_square_grid(budget) == budget
    # and one token less leaves only the next smaller square
    tighter = parse_image_rule({"kind": "deepseek-v4", "max_tokens": budget - 1})
    assert tighter.tokens(side, side) == _largest_square_grid(budget - 1) < budget


def test_deepseek_v4_default_prices_a_big_square_at_its_largest_grid() -> None:
    """V4.1's budget is 1024 tokens: the largest square grid is 31 x 31 (994 tokens; 32 x 32
    would be 1,058), docs/images.md's published 5000x5000 → 994."""
    rule = parse_image_rule("deepseek-v4")
    assert rule.tokens(5000, 5000) == _largest_square_grid(1024) == 994


# -- pricing/jsoncut.py (_Planner._container mutmut_96, mutmut_133) ----------------------------


def _planner(doc: object, indent: int | None) -> tuple[_Planner, list[object], int]:
    text = json.dumps(doc, indent=indent)
    tokens = get_tokenizer("o200k_base").count(text)
    parsed = parse(text)
    assert parsed is not None
    return _Planner(parsed, detect_style(text), get_tokenizer("o200k_base"), tokens), parsed, tokens


@pytest.mark.parametrize("indent", [None, 2])
def test_a_cut_object_keeps_each_of_its_keys_at_most_once(indent: int | None) -> None:
    """A cut drops whole elements from the middle and keeps the rest once: whatever the
    budget, the planned object has no key twice (many small keys: the planner's estimate of
    an object counts more per key than its elements' costs, so a budget just under the whole
    object's estimate fits every element)."""
    doc = {f"k{i}": i for i in range(60)}
    planner, parsed, tokens = _planner(doc, indent)
    for budget in range(1, tokens + 5):
        node, _ = planner.plan(parsed, budget)
        keys = [key for key, _ in node]
        assert len(keys) == len(set(keys)), budget
        assert set(keys) <= {*doc, "..."}, budget


def test_an_element_kept_in_part_gets_what_is_left_of_its_share_no_more() -> None:
    """``_Planner`` "chooses what to keep of a document for a budget in estimated tokens", an
    estimate being the compact-JSON length scaled by the document's tokens over its compact
    length; the element that does not fit whole is kept in part "with what is left of that
    end's share". Computed here from that definition: an array of plain ASCII strings (no
    escapes, so every character counts one) is planned within its budget at every budget."""
    doc = [("long " * 80) if k % 5 == 0 else f"short {k}" for k in range(40)]
    planner, parsed, tokens = _planner(doc, None)
    per_char = tokens / len(json.dumps(doc, separators=(",", ":")))
    for budget in range(60, 320):
        node, _ = planner.plan(parsed, budget)
        kept = json.dumps(node, separators=(",", ":"))
        assert kept.isascii()
        assert per_char * len(kept) <= budget, budget


# -- pricing/messages.py (_choices mutmut_11, _show mutmut_1) ----------------------------------


def _body(**extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.mark.parametrize("n", [1, 2, 5])
def test_n_is_any_positive_integer_one_included(n: int) -> None:
    """Chat's ``n`` is "a positive integer": 1, the default spelled out, is one."""
    assert parse_request(_body(n=n)).choices == n
    assert parse_request(_body()).choices == 1


@pytest.mark.parametrize("value", ["two", "x" * 100])
def test_a_string_where_n_belongs_is_shown_in_the_error_cut_short(value: str) -> None:
    """``_show``: a client's value in an error message is "short, and never a deep repr": a
    string is shown as the client sent it, its first 64 characters."""
    with pytest.raises(RequestError) as refused:
        parse_request(_body(n=value))
    assert refused.value.param == "n"
    assert refused.value.message == f"n must be a positive integer, not {value[:64]!r}"


# -- pricing/meter.py (measure_message mutmut_77) ----------------------------------------------


def _png(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("P", (width, height)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _image_route(rule: ImageRule) -> Route:
    return Route(
        alias="vision",
        model="openai/gpt-4o",
        tokenizer="o200k_base",
        image_rule=rule,
        supports_vision=True,
    )


def test_a_sized_image_is_defaulted_only_under_a_stand_in_rule() -> None:
    """docs/calibration.md: defaulted tokens are "URL images of unknown size at the rule's
    worst case and images under a stand-in (``flat``) rule". An image of known size priced by
    its provider's rule (gpt-4o's tiles) is neither; the same image under ``flat`` is
    defaulted, whole, and still not unsized."""
    image = {"type": "image_url", "image_url": {"url": _png(640, 480)}}
    request = parse_request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "?"}, image]}],
        }
    )
    tiles = default_image_rule("openai/gpt-4o", True)
    priced = measure(request, _image_route(tiles)).messages[0]
    assert priced.images == tiles.tokens(640, 480) > 0
    assert (priced.defaulted, priced.unsized) == (0, 0)
    flat = parse_image_rule("flat:1500")
    stood_in = measure(request, _image_route(flat)).messages[0]
    assert stood_in.images == stood_in.defaulted == 1500
    assert stood_in.unsized == 0


# -- pricing/tokenizers.py (_load_hf mutmut_5, default_tokenizer mutmut_22,
#    _HuggingFace._encode mutmut_5: equivalent) -------------------------------------------------


def test_an_unloadable_tokenizer_file_is_named_in_its_error(tmp_path: Path) -> None:
    """A ``hf:`` file that exists but does not load is a config error the operator must find:
    the message names the file and says it could not be loaded."""
    path = tmp_path / "broken-tokenizer.json"
    path.write_text("this is not a tokenizer", encoding="utf-8")
    with pytest.raises(TokenizerError) as raised:
        get_tokenizer(f"hf:{path}")
    assert f"tokenizer file {path} could not be loaded" in str(raised.value)


@pytest.mark.parametrize("model", ["gpt-4.5-preview", "openai/gpt-4.5-preview-2025-02-27"])
def test_gpt_4_5_counts_with_o200k(model: str) -> None:
    """docs/pricing.md's table: ``o200k_base`` is the tokenizer of "gpt-4o, 4.1, 4.5, 5.x,
    o-series"; gpt-4.5 is not the gpt-4 that ``cl100k_base`` counts."""
    assert default_tokenizer(model) == "o200k_base"


def test_counting_apart_leaves_out_the_special_tokens_a_file_adds(tmp_path: Path) -> None:
    """A text's count is its own tokens: a ``tokenizer.json`` whose post-processor puts a BOS
    token before every encoding (as many do) adds it to a prompt once, not to each text.
    ``count_each`` (a proof's pieces, a long text's pieces) counts what ``count`` does, which
    another request reuses."""
    vocab = {"[UNK]": 0, "[BOS]": 1, "hello": 2, "world": 3}
    hf = HFTokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", 1)]
    )
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    assert HFTokenizer.from_file(str(path)).encode("hello world").ids == [1, 2, 3]
    tok = get_tokenizer(f"hf:{path}")
    assert isinstance(tok, _HuggingFace)
    text = "hello world hello"
    assert tok.count(text) == len(text.split())
    assert count_each(tok, [text, "world"]) == [tok.count(text), tok.count("world")]
    assert count_each(tok, [text], side_by_side=False) == [tok.count(text)]
