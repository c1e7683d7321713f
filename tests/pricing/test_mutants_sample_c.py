"""What the third fresh sample of pricing/'s mutants (seed 20261208, docs/mutation.md) let
through: a proof's bound of a long text computed once, a policy whose ``high`` lies between 1
and 2, a fitted per-message weight rounded up in 0.05 steps, a sample's pull on the fit
independent of its size, the ``digits`` model weighing errors as ``features`` does, a plain
cut's removed tokens as its measured price says, an image of exactly its patch budget, a JSON
cut's removed tokens as its markers report them, a data URL without a media type, a search that
nothing fits kept to its range, and the token starts of a tokenizer file that adds a BOS
token."""

from __future__ import annotations

import base64
import json
import random
import re
from pathlib import Path

import pytest
from feature_samples import INDEX as _I
from feature_samples import features as _features
from feature_samples import sample as _sample
from gpt4o_route import gpt4o_route
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import processors

from pricing.bounds import Proof
from pricing.calibration import CalibrationPolicy, Sample, fit_correction
from pricing.capped import cut_text
from pricing.images import OpenAIPatch
from pricing.probe import placeholder
from pricing.textcut import elision_marker, search
from pricing.tokenizers import get_tokenizer, litellm_tokenizer_dir

# -- pricing/bounds.py -------------------------------------------------------------------------


def test_a_long_texts_bound_is_computed_once_per_proof() -> None:
    """``Proof._bounds``: a long text's bound is computed once however often the request is
    bounded, so a count memoised afterwards (the meter counting the same text) does not move the
    bound a proof already gave; it stays above the count."""
    proof = Proof(gpt4o_route(alias="proof-once"))
    text = " ".join(f"once{i}" for i in range(2_000))
    first = proof(text)
    count = get_tokenizer("o200k_base").count(text)  # memoised now
    assert first > count
    assert proof(text) == first


# -- pricing/calibration.py --------------------------------------------------------------------


def test_a_policy_whose_high_lies_between_one_and_two_is_valid() -> None:
    """The policy needs ``0 < low <= 1 <= high``: a ceiling of 1.5, or of exactly 1, is one."""
    assert CalibrationPolicy(high=1.5).high == 1.5
    assert CalibrationPolicy(low=1.0, high=1.0).high == 1.0


def test_a_fitted_per_message_weight_is_rounded_up_in_steps_of_five_hundredths() -> None:
    """``fit_correction``: weights per thing (messages, calls, requests) are rounded up in 0.05
    steps; prompts that cost their text plus 4 tokens a message teach a weight of 4, rounded up
    by less than one step."""
    samples = []
    for i in range(40):
        n, m = 300 + 53 * i, 1 + i % 7
        samples.append(_sample(_features(prose=n, messages=m), n + 4 * m, i))
    learnt = fit_correction(samples, exact=True)
    weight = learnt.vector[_I["messages"]]
    assert 4.0 <= weight <= 4.05 + 1e-9
    assert abs(weight / 0.05 - round(weight / 0.05)) < 1e-6


def _disagreeing_prompts(scale: int) -> list[Sample]:
    """Prompts of two kinds that disagree on what a message costs (3 or 6 tokens), every other
    one with its features and count multiplied by ``scale``."""
    samples = []
    for i in range(24):
        n, m = 150 + 37 * i, 1 + i % 6
        actual = n + (3 * m if i % 2 else 6 * m) + (2 if i % 3 == 0 else 0)
        c = scale if i % 2 else 1
        samples.append(_sample(_features(prose=n * c, messages=m * c), actual * c, i))
    return samples


def test_a_samples_weight_in_the_fit_does_not_depend_on_its_size() -> None:
    """``_base``: relative errors are what matter, each sample weighing 1 / actual², so a prompt
    ten or a hundred times larger with the same proportions pulls the fit exactly as hard: the
    correction is the same whatever the scale of half of the samples."""
    policy = CalibrationPolicy()
    learnt = fit_correction(_disagreeing_prompts(1), policy, exact=True)
    assert learnt.samples == 24
    for scale in (10, 100):
        scaled = fit_correction(_disagreeing_prompts(scale), policy, exact=True)
        assert scaled.vector == pytest.approx(learnt.vector, abs=1e-9)


def test_the_digits_model_fits_prompts_without_numbers_as_the_features_model_does() -> None:
    """``CalibrationPolicy.model``: ``digits`` is the features model without the count of
    numbers; on prompts with no numbers (relative errors weighed alike) both learn the same."""
    samples = []
    for i in range(24):
        m = 1 + i % 6
        n = 150 + 7 * i if i % 2 else 15_000 + 300 * i
        miss = (3 if i % 4 == 1 else -3) if i % 2 else (300 if i % 4 == 0 else -300)
        samples.append(_sample(_features(prose=n, messages=m), n + 4 * m + miss, i))
    features = fit_correction(samples, CalibrationPolicy(model="features"), exact=True)
    digits = fit_correction(samples, CalibrationPolicy(model="digits"), exact=True)
    assert digits.samples == features.samples == 24
    assert digits.vector == pytest.approx(features.vector, abs=1e-9)


# -- pricing/capped.py -------------------------------------------------------------------------

PLAIN_MARKER = re.compile(r"\n?\[\.\.\. [\d,]+ tokens? elided \.\.\.\]\n?")


def test_a_plain_cuts_removed_tokens_follow_its_measured_price() -> None:
    """``_cut_plain``: the marker first prices the middle at the text's average density; when
    the measured price disagrees (dense ends around a sparse middle) it reports what the price
    says: the original's tokens less those of the kept head and tail, the marker and the two
    newlines around it not counted as kept (a token or two apart where the pieces join)."""
    rng = random.Random(20261208)

    def dense(lines: int) -> str:
        return "\n".join(
            "".join(rng.choice("0123456789abcdef") for _ in range(60)) for _ in range(lines)
        )

    sparse = "\n".join(" ".join(["the"] * 30) for _ in range(800))
    text = f"{dense(60)}\n{sparse}\n{dense(60)}"
    tok = get_tokenizer("o200k_base")
    total = tok.count(text)
    for budget in (800, 1500, 3000):
        cut = cut_text(text, budget, tok)
        assert cut is not None and cut.kind == "text" and cut.tokens <= budget
        [marker] = PLAIN_MARKER.finditer(cut.text)
        kept = tok.count(cut.text[: marker.start()]) + tok.count(cut.text[marker.end() :])
        assert abs(cut.removed_tokens - (total - kept)) <= 2


# -- pricing/images/kinds.py -------------------------------------------------------------------


def test_an_image_of_exactly_its_patch_budget_is_not_shrunk() -> None:
    """docs/images.md § OpenAI patches: the image is scaled down only if its patches *exceed*
    the budget; 1536x1000 is 48 x 32 = 1536 patches, exactly a budget of 1536."""
    rule = OpenAIPatch(high_max_dim=2048, high_patch_budget=1536)
    assert rule.patches(1536, 1000, "high") == 48 * 32
    assert OpenAIPatch(high_max_dim=2048, high_patch_budget=1535).patches(1536, 1000, "high") < 1536


# -- pricing/jsoncut.py ------------------------------------------------------------------------

MARKER_TOKENS = re.compile(r"\[\.\.\. (?:[\d,]+ (?:items?|keys?) \()?([\d,]+) tokens?\)? elided")


def test_a_json_cuts_removed_tokens_are_what_its_markers_report() -> None:
    """docs/capping.md: ``removed_tokens`` is the sum of what the markers report, over every
    marker of a cut document (an array cut at the top, an object and a string inside)."""
    tok = get_tokenizer("o200k_base")
    doc = [
        {"id": i, "log": "\n".join(f"step {j} of job {i} finished" for j in range(30))}
        for i in range(60)
    ]
    for budget in (300, 900, 2500):
        cut = cut_text(json.dumps(doc, indent=2), budget, tok)
        assert cut is not None and cut.kind == "json"
        reported = [int(n.replace(",", "")) for n in MARKER_TOKENS.findall(cut.text)]
        assert reported
        assert cut.removed_tokens == sum(reported)


# -- pricing/probe.py --------------------------------------------------------------------------


def test_a_data_url_without_a_media_type_is_named_as_octet_stream() -> None:
    """A data URL's media type is read case-insensitively and one left out is
    ``application/octet-stream``: the placeholder (name and fingerprint) of ``data:;base64,``
    is that of the same bytes named ``application/octet-stream``, in lower case."""
    payload = base64.b64encode(b"not an image at all, just bytes" * 4).decode("ascii")
    bare = placeholder(None, "data:;base64," + payload)
    named = placeholder(None, "data:application/octet-stream;base64," + payload)
    assert bare == named
    assert bare.startswith("[image omitted: application/octet-stream #")


# -- pricing/textcut.py -----------------------------------------------------------------------


def test_the_search_asks_only_for_kept_sizes_in_its_range_even_when_nothing_fits() -> None:
    """``search``: the kept size is searched in ``[0, k_max]``; when even ``k = 0`` is over the
    budget it says so (no fit, the smallest price seen) without asking ``render`` for a size
    outside that range."""
    tok = get_tokenizer("o200k_base")
    asked: list[int] = []

    def render(k: int) -> tuple[str, int]:
        asked.append(k)
        return "word " * k + elision_marker(5_000), 5_000

    found, cheapest = search(render, 40, 100, 3, tok)
    assert found is None
    assert cheapest == tok.count(elision_marker(5_000))
    assert asked and all(0 <= k <= 100 for k in asked)


# -- pricing/tokenizers.py ---------------------------------------------------------------------


def bos_tokenizer_file(folder: Path) -> Path:
    """DeepSeek's shipped ``tokenizer.json`` with a post-processor that adds a BOS token (as
    Llama's do), saved in ``folder``."""
    source = HFTokenizer.from_file(str(litellm_tokenizer_dir() / "deepseek_tokenizer.json"))
    bos = "<｜begin▁of▁sentence｜>"
    source.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 0)]),
        ]
    )
    path = folder / "tokenizer.json"
    source.save(str(path))
    assert source.encode("hi", add_special_tokens=True).ids[0] == 0  # the file adds a BOS
    return path


def test_a_tokenizer_file_that_adds_a_bos_token_has_one_start_per_counted_token(
    tmp_path: Path,
) -> None:
    """An ``hf:`` tokenizer file whose post-processor adds a BOS token (as Llama's do): a text's
    count is of its own tokens, and ``boundaries`` gives one start per token of the text, so
    a cut at a token start never lands on the BOS's empty span."""
    path = bos_tokenizer_file(tmp_path)
    tok = get_tokenizer(f"hf:{path}")
    text = "Hello, tokenizer with a BOS! 你好"
    starts = tok.boundaries(text)
    assert len(starts) == tok.count(text)
    assert starts[0] == 0 and starts == sorted(starts)
