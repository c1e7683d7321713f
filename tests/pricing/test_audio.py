"""Audio is priced by its length where the route's provider takes it (Gemini: 32 tokens a
second), and as its note where it is sent as one (pricing.audio, docs/pricing.md "Audio")."""

from __future__ import annotations

from dataclasses import replace

from gpt4o_route import gpt4o_route
from media_files import b64, wav

from pricing import audio
from pricing.audio import PER_SECOND, SLOWEST_BYTES_PER_SECOND, audio_seconds
from pricing.images import parse_image_rule
from pricing.messages import ImagePart
from pricing.meter import price_image
from pricing.probe import placeholder
from pricing.tokenizers import get_tokenizer

GEMINI = replace(gpt4o_route(1_000_000), image_rule=parse_image_rule("gemini-tile"))


def _url(data: bytes, media: str = "audio/wav") -> str:
    return f"data:{media};base64,{b64(data)}"


def test_a_files_length_is_read_from_its_header() -> None:
    assert audio_seconds(_url(wav(60))) == 60.0
    assert audio_seconds(_url(wav(2.5, rate=16000))) == 2.5


def test_a_length_that_cannot_be_read_is_the_longest_its_bytes_could_last() -> None:
    noise = bytes(range(256)) * 30
    assert audio_seconds(_url(noise, "audio/mp3")) == len(noise) / SLOWEST_BYTES_PER_SECOND
    assert audio_seconds("data:audio/ogg;base64,@@not base64@@") == 0.0


def test_gemini_counts_it_by_the_second_and_calibration_never_lowers_it() -> None:
    price = price_image(ImagePart(_url(wav(61))), GEMINI, None)
    assert (price.tokens, price.sized) == (61 * PER_SECOND, False)


def test_a_route_that_takes_no_audio_gets_its_note() -> None:
    url = _url(wav(600))
    price = price_image(ImagePart(url), gpt4o_route(), None)
    note = placeholder(None, url)
    assert note.startswith("[audio omitted: audio/wav #")
    assert (price.placeholder, price.tokens) == (note, get_tokenizer("o200k_base").count(note))


def test_a_file_is_read_once_per_tenant() -> None:
    url = _url(wav(3))
    misses = audio._CACHE.misses
    audio_seconds(url, b"team-a")
    audio_seconds(url, b"team-a")
    audio_seconds(url, b"team-b")
    assert audio._CACHE.misses == misses + 2
