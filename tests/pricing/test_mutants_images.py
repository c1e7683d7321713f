"""What the mutation run of pricing/ let through in the image rules and the probe
(docs/mutation.md): fine-tune names, config refusals that name their kind, a model spec with a
variant, Qwen's downscale, a JPEG that ends before its frame, a WebP read from exactly its
header, a URL without a host, and the probe cache's size and counters."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from pricing.images import QwenVL, default_image_rule, parse_image_rule
from pricing.probe import Header, ImageError, ImageInfo, ProbeCache, placeholder, read_header
from pricing.probe import _Entry as Entry


@pytest.mark.parametrize(
    ("tuned", "base"),
    [
        ("ft:gpt-4o-mini-2024-07-18:org::abc", "gpt-4o-mini-2024-07-18"),
        # An organisation whose name holds "-nano-" does not make a gpt-5 fine-tune a nano.
        ("ft:gpt-5-2025-08-07:acme-nano-lab::abc123", "gpt-5-2025-08-07"),
        ("openai/ft:gpt-5-2025-08-07:acme-nano-lab:run-2:abc123", "gpt-5-2025-08-07"),
    ],
    ids=["gpt-4o-mini", "gpt-5-org-nano", "gpt-5-prefixed-suffixed"],
)
def test_a_fine_tuned_model_takes_its_base_models_rule(tuned: str, base: str) -> None:
    """docs/images.md § Defaults by model name: fine-tune decorations (``ft:<model>:org::id``)
    are ignored: everything after the base model's name is the organisation and the job."""
    assert default_image_rule(tuned, supports_vision=True) == default_image_rule(
        base, supports_vision=True
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"kind": "deepseek-v4", "max_width_ratio": 0},
            "image rule 'deepseek-v4': deepseek-v4 max_width_ratio must be positive",
        ),
        (
            {"kind": "openai-patch", "high_max_dim": 0},
            "image rule 'openai-patch': "
            "openai-patch high max_dim and patch_budget must be positive",
        ),
        (
            {"kind": "pixtral", "merge": 0},
            "image rule 'pixtral': pixtral constants must be positive",
        ),
    ],
    ids=["deepseek-v4", "openai-patch", "pixtral"],
)
def test_a_refused_constant_is_named_with_its_kind(spec: dict[str, object], message: str) -> None:
    """A config error reads as one (pricing/images/constants.py): the message says which
    rule kind refused what, and nothing else."""
    with pytest.raises(ValueError) as refused:
        parse_image_rule(spec)
    assert str(refused.value) == message


def test_a_model_spec_with_a_variant_takes_that_variant_of_the_models_kind() -> None:
    """``{model: ..., variant: ...}``: the model picks the kind, the variant replaces its preset
    (docs/images.md § Where sources disagree: gpt-5.4-mini's current-docs multiplier, 1.2)."""
    rule = parse_image_rule({"model": "gpt-5.4-mini", "variant": "gpt-5.4-mini@current-docs"})
    assert rule == parse_image_rule("openai-patch:gpt-5.4-mini@current-docs")
    assert dict(rule.params)["multiplier"] == 1.2
    assert rule != parse_image_rule("model:gpt-5.4-mini")  # the preset is replaced


def test_qwen_shrinks_an_image_over_max_pixels_to_fit_it() -> None:
    """docs/images.md § Qwen-VL: over max_pixels, scale by β = √(h·w/max) and floor each side
    to a multiple of f. Qwen2.5's max 12,845,056 is 3584², and 3584 = 128·28: a 4096² image
    becomes 3584² exactly, 128·128 tokens plus the 2 wrappers (the rule's bound)."""
    qwen = QwenVL(**QwenVL.VARIANTS["qwen2.5"])  # type: ignore[arg-type]
    bound = qwen.bound("auto")
    assert bound is not None
    assert qwen.price(4096, 4096, "auto") == 128 * 128 + 2 == bound
    assert qwen.price(8192, 4096, "auto") <= bound
    assert qwen.price(8192, 4096, "auto") > 128 * 128 * 9 // 10  # shrunk, not collapsed


def test_a_jpeg_ending_before_any_frame_header_is_refused_not_read_further() -> None:
    """An end-of-image marker (FF D9) before any start-of-frame: the image has ended, so there
    is no header to wait for; a stream is not asked for bytes past the image's end."""
    raw = b"\xff\xd8" + b"\xff\xfe\x00\x06abcd" + b"\xff\xd9"  # SOI, a comment, EOI
    with pytest.raises(ImageError) as refused:
        read_header(raw)
    assert "no frame header" in refused.value.message
    with pytest.raises(ImageError):
        read_header(raw + b"\xff\xfe\x00\x02")


@pytest.mark.parametrize("mode", ["RGB", "RGBA"])  # lossy: VP8, and VP8X (alpha)
def test_a_webp_header_is_read_from_its_first_30_bytes(mode: str) -> None:
    """RIFF (12 bytes), the chunk tag and size (8), then 10 bytes of the chunk hold a VP8's
    frame size (tag 3, start code 3, width 2, height 2) and a VP8X's canvas (flags 4, width 3,
    height 3): 30 bytes are enough, and a reader asks for no more."""
    buffer = io.BytesIO()
    Image.new(mode, (500, 250)).save(buffer, "WEBP", quality=70)
    raw = buffer.getvalue()
    assert raw[12:16] == (b"VP8 " if mode == "RGB" else b"VP8X")
    assert read_header(raw[:30]) == Header("webp", 500, 250)
    assert read_header(raw[:29]) == 30


def test_a_url_without_a_host_is_shown_as_it_came() -> None:
    """A relative or host-less URL has no scheme and host to keep: no ``://`` is made up."""
    assert placeholder(None, "images/cat.png") == "[image omitted: images/cat.png]"
    assert placeholder(None, "cat.png") == "[image omitted: cat.png]"


def test_the_probe_cache_holds_4096_entries_by_default() -> None:
    """docs/images.md § The probe cache: the LRU holds 4,096 entries."""
    cache = ProbeCache()
    entry = Entry(ImageInfo(1, 1, "png", "00" * 16), (), None)
    for i in range(4097):
        cache.put(i.to_bytes(4, "big"), entry)
    assert len(cache) == 4096
    assert cache.get((0).to_bytes(4, "big")) is None  # the oldest went
    assert cache.get((1).to_bytes(4, "big")) is entry


def test_a_new_probe_cache_has_counted_nothing() -> None:
    cache = ProbeCache()
    assert (cache.hits, cache.misses) == (0, 0)
    cache.hits += 1
    assert cache.hits == 1
