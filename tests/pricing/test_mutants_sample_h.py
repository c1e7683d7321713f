"""What the eighth fresh sample of pricing/'s mutants (80 mutants at bc2b084, docs/mutation.md)
let through: a byte-level file whose vocabulary is not spelled in GPT-2's byte characters left
with Hugging Face, a file without a normaliser counted without NFKC, the fitted image weight in
the correction's summary, a JSON document with long values classed as structured and prose with
commas and quotes as prose, a Pixtral patch of 0 and a square-only Qwen-VL rule, a deeply nested
element the cut drops, a string's marker saying how much of it was cut, a text-only route's image
detail, an undecodable image's exact message, and the heap a tokenizer's load freed given back to
the OS."""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path
from typing import Any

import pytest
from test_calibration import synthetic
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from pricing import byte_level
from pricing.calibration import IMAGES, Anchor, anchored, fit_correction
from pricing.capped import cut_text
from pricing.content import CLASSES, PROSE, STRUCTURED, classify
from pricing.images import default_image_rule
from pricing.images.spec import parse_image_rule
from pricing.messages import RequestError, parse_request
from pricing.meter import measure
from pricing.route import Route
from pricing.tokenizers import _HuggingFace, _Tiktoken, get_tokenizer, litellm_tokenizer_dir

# -- pricing/byte_level.py (_byte_decoder mutmut_31, ByteLevel._normal mutmut_9) ---------------

SHIPPED = litellm_tokenizer_dir() / "anthropic_tokenizer.json"


def _shipped_variant(tmp_path: Path, name: str, **changes: Any) -> Path:
    spec = json.loads(SHIPPED.read_text(encoding="utf-8"))
    for key, value in changes.items():
        spec[key] = value
    path = tmp_path / name
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def test_a_vocabulary_not_spelled_in_byte_characters_stays_with_hugging_face(
    tmp_path: Path,
) -> None:
    """``pricing.byte_level``: a file that is not exactly a byte-level BPE "stays with Hugging
    Face". A vocabulary entry spelled with a character that stands for no byte in GPT-2's
    alphabet (``Ő``, past ``ÿ``: the stand-ins of the bytes that are not printable are the
    first code points from 256 on, one per such byte) is not a byte string: ``load`` says no,
    and the ``hf:`` route is counted by Hugging Face, as Hugging Face counts it."""
    spec = json.loads(SHIPPED.read_text(encoding="utf-8"))
    vocab = dict(spec["model"]["vocab"])
    vocab["Ő"] = max(vocab.values()) + 1
    path = _shipped_variant(tmp_path, "tokenizer.json", model={**spec["model"], "vocab": vocab})
    assert byte_level.load(path, "variant") is None
    tok = get_tokenizer(f"hf:{path}")
    assert isinstance(tok, _HuggingFace)
    text = "Őrség, a naïve ﬁle"
    reference = HFTokenizer.from_file(str(path))
    assert tok.count(text) == len(reference.encode(text, add_special_tokens=False).ids)


def test_a_byte_level_file_without_a_normaliser_is_counted_without_nfkc(tmp_path: Path) -> None:
    """``pricing.byte_level``: NFKC is applied "when the file says so". A byte-level file
    without a normaliser (NFKC or none are both GPT-2's recipe) is still counted by tiktoken,
    and a ligature, a full-width letter or a circled digit is counted as written, as Hugging
    Face counts it, not as NFKC would rewrite it."""
    path = _shipped_variant(tmp_path, "tokenizer.json", normalizer=None)
    tok = get_tokenizer(f"hf:{path}")
    assert isinstance(tok, _Tiktoken) and tok.bpe is not None and not tok.bpe.nfkc
    reference = HFTokenizer.from_file(str(path))
    for text in ("ﬁne ﬁles, Ｅvery day ①②", "naïve café", "plain ascii"):
        assert tok.count(text) == len(reference.encode(text, add_special_tokens=False).ids), text


# -- pricing/calibration.py (fit_correction mutmut_123) -----------------------------------------


def test_the_fitted_image_weight_is_the_summary_an_old_anchor_prices_new_images_by() -> None:
    """``Correction``: ``text``/``framing``/``images`` are the summary of the fitted weights. A
    route whose provider prices images at 1.4x the meter learns an image factor of about that,
    and the summary says it: an anchor recorded before features existed extends by the new
    images at that factor (``anchored``), never at the meter's own 1.0 (an underestimate is an
    overflow at the provider)."""
    c = fit_correction(synthetic(40, 2))  # images at 1.4x the meter (``skewed_truth``)
    assert c.images == c.weights[IMAGES]
    assert c.images >= 1.4
    anchor = Anchor(text=9000, framing=400, images=765, actual=11000)
    more = 2 * 765
    assert anchored(anchor, 9000, 400, 765 + more, c) - anchor.actual >= 1.4 * more


# -- pricing/content.py (classify mutmut_15) ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (
            json.dumps(
                {
                    "title": "A walk through the old town",
                    "body": "We started at the bridge and followed the river past the market "
                    "towards the cathedral, then back.",
                }
            ),
            STRUCTURED,
        ),
        (
            'Apples, pears, plums and figs were on the table, and "the good bread", as she '
            "called it, was still warm.",
            PROSE,
        ),
        (
            "We packed the tent, the stove, two lamps and the maps, then drove north, slowly, "
            '"as the road allows," he said.',
            PROSE,
        ),
    ],
    ids=["json-with-long-values", "prose-with-quotes", "prose-with-commas"],
)
def test_json_is_structured_by_its_brackets_and_prose_with_punctuation_stays_prose(
    text: str, kind: int
) -> None:
    """``pricing.content``: the classes are "structured/JSON" and prose (docs/calibration.md §
    Issue 18). A JSON object whose values are long sentences has little punctuation for its
    length, but it opens with a brace: it is structured. Prose with as many commas and quotes
    does not open with one: it is prose, not JSON."""
    assert CLASSES[classify(text)] == CLASSES[kind]


# -- pricing/images/kinds.py (Pixtral.__post_init__ mutmut_4, QwenVL.__post_init__ mutmut_9) ----


@pytest.mark.parametrize("constant", ["patch", "merge", "max_image_size"])
def test_a_pixtral_constant_of_zero_is_refused_naming_its_kind(constant: str) -> None:
    """A config error reads as one (pricing/images/constants.py): a Pixtral rule's patch,
    merge and maximum size must be positive (a patch of 0 would divide by zero on every
    image), and the refusal names the kind."""
    with pytest.raises(ValueError) as refused:
        parse_image_rule({"kind": "pixtral", constant: 0})
    assert str(refused.value) == "image rule 'pixtral': pixtral constants must be positive"


def test_a_qwen_vl_rule_that_takes_only_square_images_is_a_rule() -> None:
    """Qwen rejects aspect ratios over ``max_aspect`` and such an image is priced at the rule's
    bound (docs/images.md § Qwen-VL and § worst cases). A limit of 1, the tightest there is (no
    image is narrower than square), is a host that takes only square images: a square image is
    priced by ``smart_resize`` (1024x1024 → 1369 + 2 wrappers, published), any other at the
    bound (16,386)."""
    rule = parse_image_rule({"kind": "qwen-vl", "max_aspect": 1})
    assert rule.tokens(1024, 1024) == 1369 + 2
    assert rule.tokens(1024, 1023) == rule.worst_case() == 16_386


# -- pricing/jsoncut.py (_Planner._clen mutmut_22, _Planner._string mutmut_44) ------------------


def test_a_deeply_nested_element_the_cut_drops_leaves_the_document_json() -> None:
    """docs/capping.md: content that parses as a JSON array is cut structurally and stays valid
    JSON; only "documents nested too deeply for Python's recursion are cut as text". An element
    nested 600 deep (Python's json reads and writes it) in the middle of a log is dropped by a
    cut to half: sizing it must not recurse in Python level by level (only a narrow container
    near the top is summed from its children), and the cut stays JSON."""
    tok = get_tokenizer("o200k_base")
    deep: object = 1
    for _ in range(600):
        deep = [deep]
    log: list[object] = [f"line {i}: compiled module {i} without warnings" for i in range(300)]
    log[150] = deep
    text = json.dumps(log)
    cap = tok.count(text) // 2
    cut = cut_text(text, cap, tok)
    assert cut is not None and cut.kind == "json"
    assert cut.tokens <= cap
    kept = json.loads(cut.text)
    assert kept[0] == log[0] and kept[-1] == log[-1] and "[[[" not in cut.text


_MARKER = re.compile(r"\n\[\.\.\. ([\d,]+) tokens elided \.\.\.\]\n")


@pytest.mark.parametrize("share", [0.75, 0.5, 0.25])
def test_a_string_cut_inside_json_reports_the_tokens_of_its_middle(share: float) -> None:
    """docs/capping.md: a string alone too big is cut inside the JSON, head and tail around the
    same text marker, whose number is "the middle's token count" (an estimate from the text's
    density: the middle is never tokenized). For a log of like lines the estimate is within a
    few percent of the removed middle's real count, at any cap, and ``removed_tokens`` is what
    the marker says."""
    tok = get_tokenizer("o200k_base")
    log = "\n".join(f"step {i}: compiled module number {i} without warnings" for i in range(400))
    text = json.dumps({"exit_code": 0, "stdout": log})
    cut = cut_text(text, int(tok.count(text) * share), tok)
    assert cut is not None and cut.kind == "json"
    out = json.loads(cut.text)["stdout"]
    marker = _MARKER.search(out)
    assert marker is not None
    head, tail = out[: marker.start()], out[marker.end() :]
    assert log.startswith(head) and log.endswith(tail)
    middle = tok.count(log[len(head) : len(log) - len(tail)])
    reported = int(marker.group(1).replace(",", ""))
    assert cut.removed_tokens == reported
    assert abs(reported - middle) <= 0.05 * middle, (reported, middle)


# -- pricing/meter.py (price_image mutmut_32) ---------------------------------------------------


@pytest.mark.parametrize("detail", ["low", "high"])
def test_an_image_a_text_only_route_sends_as_text_keeps_its_detail(detail: str) -> None:
    """docs/pricing.md: the meter gives one ``ImagePrice`` per image occurrence (rule, size,
    detail, tokens, ...). On a text-only route the image is priced as its placeholder text
    (rule ``text-only``), and its report still says the detail the client asked for."""
    route = Route(alias="text", model="openai/gpt-3.5-turbo", tokenizer="cl100k_base")
    request = parse_request(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in this picture?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://example.com/cat.png", "detail": detail},
                        },
                    ],
                }
            ],
        }
    )
    (image,) = measure(request, route).image_details
    assert (image.rule, image.detail) == ("text-only", detail)


# -- pricing/probe.py (_Base64Reader.__call__ mutmut_54) ----------------------------------------


@pytest.mark.parametrize(
    "url",
    ["data:image/png;base64,!!!!", "data:image/png;base64,iVBORw0KGgo=AAAA"],
    ids=["too-short", "padding-inside"],
)
def test_an_image_that_is_not_base64_is_refused_saying_so(url: str) -> None:
    """``probe`` raises an ImageError, "a 400 for the client", for an undecodable image; the
    meter names the offending part: the client reads exactly where and what is wrong."""
    route = Route(
        alias="gpt-4o",
        model="openai/gpt-4o",
        image_rule=default_image_rule("openai/gpt-4o", True),
        supports_vision=True,
    )
    content = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    request = parse_request({"model": "m", "messages": [{"role": "user", "content": content}]})
    with pytest.raises(RequestError) as refused:
        measure(request, route)
    where = "messages[0].content[1].image_url.url"
    assert refused.value.param == where
    assert refused.value.message == f"{where}: the image data is not valid base64"


# -- pricing/tokenizers.py (_malloc_trim mutmut_11) ---------------------------------------------


def _resident() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not Path("/proc/self/statm").exists(),
    reason="malloc_trim is glibc's; resident memory is read from Linux's /proc",
)
def test_loading_a_tokenizer_gives_the_freed_heap_back_to_the_os(tmp_path: Path) -> None:
    """``pricing.tokenizers``: loading a tokenizer frees megabytes of temporaries that glibc
    keeps mapped, so a load ends by giving the freed heap back to the OS (``malloc_trim``;
    measured 16 MiB on an idle worker, bench/REPORT.md section 2). Here the freed heap is
    64 MiB of blocks freed below one still in use (glibc cannot shrink the heap past it by
    itself): once an ``hf:`` file is loaded, the process holds it no more."""
    tokenizer = HFTokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]))
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    tokenizer.save(str(first))
    tokenizer.save(str(second))
    # a first load: what earlier tests freed is given back too, so the blocks below take
    # pages of their own
    get_tokenizer(f"hf:{first}")
    mib = 1 << 20
    before = _resident()
    blocks = [bytes(4000) for _ in range(64 * 256)]
    in_use = bytes(4000)
    del blocks
    assert _resident() >= before + 48 * mib  # freed, and still resident
    get_tokenizer(f"hf:{second}")
    assert _resident() <= before + 16 * mib
    assert in_use == bytes(4000)
