"""Audio and video are priced by their length where the route's provider takes them (Gemini:
audio 32 tokens a second; video a frame a second and 42 more), and as their note where they are
sent as one (pricing.recordings, docs/pricing.md "Audio and video")."""

from __future__ import annotations

import math
import struct
from dataclasses import replace

import pytest
from gpt4o_route import gpt4o_route
from hypothesis import given
from hypothesis import strategies as st
from media_files import b64, video, wav

from pricing import recordings
from pricing.images import parse_image_rule
from pricing.messages import ImagePart, RequestError, parse_request, render_content
from pricing.meter import price_image
from pricing.probe import placeholder
from pricing.recordings import (
    AUDIO_SECOND,
    FRAME,
    SLOWEST_BYTES_PER_SECOND,
    USER_AUDIO_SECOND,
    VIDEO_SECOND,
    input_audio_url,
    is_recording,
    recording_seconds,
    recording_tokens,
)
from pricing.tokenizers import get_tokenizer
from proxy.sim import recordings as sim
from proxy.transports.chat_to_messages import messages_body

GEMINI = replace(gpt4o_route(1_000_000), image_rule=parse_image_rule("gemini-tile"))
LIVE_WEBM = ("-c:v", "libvpx", "-f", "webm", "-live", "1")


def _url(data: bytes, media: str = "audio/wav") -> str:
    return f"data:{media};base64,{b64(data)}"


def test_a_files_length_is_read_from_its_header() -> None:
    assert recording_seconds(_url(wav(60))) == 60.0
    assert recording_seconds(_url(wav(2.5, rate=16000))) == 2.5


def test_a_length_that_cannot_be_read_is_the_longest_its_bytes_could_last() -> None:
    noise = bytes(range(256)) * 30
    assert recording_seconds(_url(noise, "audio/mp3")) == len(noise) / SLOWEST_BYTES_PER_SECOND
    assert recording_seconds(_url(noise, "video/mp4")) == len(noise) / SLOWEST_BYTES_PER_SECOND
    assert recording_seconds("data:audio/ogg;base64,@@not base64@@") == 0.0


def test_gemini_counts_audio_by_the_second_and_calibration_never_lowers_it() -> None:
    price = price_image(ImagePart(_url(wav(61))), GEMINI, None)
    assert (price.rule, price.tokens, price.sized) == ("audio", 61 * AUDIO_SECOND, False)


def test_a_route_that_takes_no_audio_gets_its_note() -> None:
    url = _url(wav(600))
    price = price_image(ImagePart(url), gpt4o_route(), None)
    note = placeholder(None, url)
    assert note.startswith("[audio omitted: audio/wav #")
    assert (price.placeholder, price.tokens) == (note, get_tokenizer("o200k_base").count(note))


def test_a_file_is_read_once_per_tenant() -> None:
    url = _url(wav(3))
    misses = recordings._CACHE.misses
    recording_seconds(url, b"team-a")
    recording_seconds(url, b"team-a")
    recording_seconds(url, b"team-b")
    assert recordings._CACHE.misses == misses + 2


@pytest.mark.parametrize(
    ("suffix", "media", "args"),
    [
        ("mp4", "video/mp4", ()),
        ("mov", "video/quicktime", ()),
        ("wmv", "video/x-ms-wmv", ()),
        ("avi", "video/avi", ()),
        ("webm", "video/webm", ("-c:v", "libvpx")),
        ("mkv", "video/x-matroska", ()),
    ],
)
def test_a_videos_length_is_read_from_its_container(suffix: str, media: str, args: tuple) -> None:
    assert recording_seconds(_url(video(6, suffix, *args), media)) == pytest.approx(6, abs=0.01)


def test_a_live_webm_states_no_length_and_is_priced_to_its_last_frame_and_a_second() -> None:
    """MediaRecorder and ``-live`` WebM leave the duration out: the last block's time is read."""
    seconds = recording_seconds(_url(video(6, "webm", *LIVE_WEBM), "video/webm"))
    assert 6 <= seconds <= 7


def test_gemini_counts_a_video_by_its_frames_and_seconds_never_below_google() -> None:
    url = _url(video(6), "video/mp4")
    price = price_image(ImagePart(url), GEMINI, None)
    assert (price.rule, price.sized) == ("video", False)
    assert price.tokens == 6 * FRAME + 6 * VIDEO_SECOND
    # Google's default: 258 a frame, 32 of audio and ~10 of metadata a second
    assert sim.video_tokens(6.0) <= price.tokens <= 1.1 * sim.video_tokens(6.0)


def test_a_parts_frame_rate_multiplies_its_frames() -> None:
    url = _url(video(6), "video/mp4")
    sampled = url.replace(";base64,", ";fps=4.0;base64,")
    assert recording_tokens(sampled) == 24 * FRAME + 6 * VIDEO_SECOND
    assert recording_tokens(sampled) >= sim.video_tokens(6.0, fps=4.0)


def test_a_route_that_takes_no_video_gets_its_note() -> None:
    url = _url(video(6), "video/mp4")
    price = price_image(ImagePart(url), gpt4o_route(), None)
    assert price.placeholder == placeholder(None, url)
    assert price.placeholder.startswith("[video omitted: video/mp4 #")


@given(st.binary(max_size=300))
def test_any_bytes_after_a_matroska_magic_give_a_length_or_the_worst_case(tail: bytes) -> None:
    data = b"\x1a\x45\xdf\xa3" + tail
    seconds = recording_seconds(_url(data, "video/webm"))
    assert math.isfinite(seconds) and seconds >= 0


@given(
    duration=st.floats(0, 1e308, allow_nan=False, allow_infinity=False),
    fps=st.floats(1e-300, 1e300, allow_nan=False, allow_infinity=False),
)
def test_a_stated_length_and_frame_rate_give_a_price_whatever_they_state(
    duration: float, fps: float
) -> None:
    """A WebM may state any duration, and a data URL any frame rate: the price stays a number
    (it was an OverflowError, a 500, for 1e300 seconds at 1e20 frames a second)."""
    info = b"\x44\x89\x88" + struct.pack(">d", duration)  # Duration, an 8-byte float
    segment = b"\x15\x49\xa9\x66" + bytes([0x80 | len(info)]) + info  # Info
    data = b"\x1a\x45\xdf\xa3\x80\x18\x53\x80\x67\xff" + segment  # EBML, Segment of unknown size
    url = f"data:video/webm;fps={fps!r};base64,{b64(data)}"
    tokens = recording_tokens(url)
    assert tokens >= 0 and math.isfinite(float(tokens))


# --- chat ``input_audio`` parts (OpenAI's audio models) ---------------------------------------


def _chat_audio(seconds: float, fmt: str = "wav") -> ImagePart:
    (message,) = parse_request(
        {"messages": [{"role": "user", "content": [_input_audio(wav(seconds), fmt)]}]}
    ).messages
    (part,) = message.parts
    assert isinstance(part, ImagePart)
    return part


def _input_audio(data: bytes, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}}


def test_chat_audio_is_priced_by_the_second_where_it_goes_as_audio() -> None:
    """OpenAI: a token per 100 ms of user audio; a default calibration never prices below."""
    audio_model = replace(gpt4o_route(), model="gpt-audio", supports_vision=False)
    for route in (gpt4o_route(), audio_model):
        price = price_image(_chat_audio(61.5), route, None)
        assert (price.rule, price.tokens, price.sized) == ("audio", 615, False)
        assert price.placeholder is None
    assert USER_AUDIO_SECOND == 10


def test_chat_audio_on_a_google_route_is_priced_at_googles_rate() -> None:
    price = price_image(_chat_audio(61), GEMINI, None)
    assert (price.tokens, price.sized) == (61 * AUDIO_SECOND, False)


def test_chat_audio_on_an_anthropic_route_is_priced_as_the_note_it_is_sent_as() -> None:
    part = _chat_audio(600)
    price = price_image(part, replace(gpt4o_route(), provider="anthropic"), None)
    note = recordings.note(part.url)
    assert (price.placeholder, price.tokens) == (note, get_tokenizer("o200k_base").count(note))
    content = [{"type": "text", "text": "Transcribe."}, _input_audio(wav(600))]
    body = {"model": "claude", "messages": [{"role": "user", "content": content}]}
    block = messages_body(body, 8)["messages"][0]["content"][1]
    assert block == {"type": "text", "text": note}


def test_audio_of_unreadable_length_is_priced_as_long_as_its_bytes_could_last() -> None:
    noise = bytes(range(256)) * 40
    url = input_audio_url({"data": b64(noise), "format": "mp3"})
    assert url is not None
    price = price_image(ImagePart(url, input_audio=True), gpt4o_route(), None)
    assert price.tokens == math.ceil(len(noise) / SLOWEST_BYTES_PER_SECOND * USER_AUDIO_SECOND)


@given(
    fmt=st.from_regex(recordings.INPUT_AUDIO_FORMAT, fullmatch=True),
    data=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123456789+/=", max_size=64),
)
def test_an_audio_part_renders_back_as_it_came(fmt: str, data: str) -> None:
    """What the parser reads, a re-rendered message (capped, offloaded around it) sends again."""
    wire = {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
    (message,) = parse_request({"messages": [{"role": "user", "content": [wire]}]}).messages
    assert render_content(message.parts, keep_list=True) == [wire]
    assert is_recording(message.parts[0].url)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("audio", "param"),
    [
        (None, "messages[0].content[0].input_audio"),
        ({"data": "AAAA"}, "messages[0].content[0].input_audio"),
        ({"data": 3, "format": "wav"}, "messages[0].content[0].input_audio"),
        ({"data": "AAAA", "format": "wav;base64,x"}, "messages[0].content[0].input_audio"),
        ({"data": "AAAA", "format": "WAV"}, "messages[0].content[0].input_audio"),
    ],
)
def test_a_malformed_audio_part_is_a_clear_error(audio: object, param: str) -> None:
    part = {"type": "input_audio", "input_audio": audio}
    with pytest.raises(RequestError) as caught:
        parse_request({"messages": [{"role": "user", "content": [part]}]})
    assert caught.value.param == param
    assert "format" in str(caught.value) and "base64" in str(caught.value)
