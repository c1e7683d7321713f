"""Audio and video as a route counts them: their seconds at the provider's rate, where the
provider takes them.

Gemini takes both inline (``inlineData`` of an ``audio/*`` or ``video/*`` type) and counts them
by their length (docs/pricing.md, "Audio and video"): audio at 32 tokens a second; video as a
frame a second (258 tokens at the default media resolution, 66 or 70 at a low or medium one,
280 at Gemini 3's high), its soundtrack's 32 and a timestamp, "about 300 tokens a second" in
all. Priced as a one-line note, as they were, a five-minute recording cost about 15 tokens
where Google counts 9,600 of audio or ~90,000 of video. Translated for a chat route, they are
sent, and priced, as their note (below: the chat wire's own audio is another matter).

OpenAI's chat models that take audio take it as an ``input_audio`` part (base64 and its format,
wav or mp3) and count it by its length too: "audio tokens in user messages are 1 token per 100
ms of audio" (OpenAI's Realtime API costs guide, the one rate OpenAI publishes for its audio
models; the chat models' own pages state none). Such a part is sent on as audio to every route
but Anthropic's, which takes none (``proxy.transports.chat_to_messages`` sends its note), so it
is priced at that rate wherever it goes as audio, Google's 32 a second on a Google route. The
rate is priced as a default (calibration learns what the route really counts and never prices
below it). Audio from the Gemini wire is still sent to a chat route as its note: a route's
model may take no audio, and the client did not choose that wire's audio for it.

A video is priced at the dearest of those per-frame figures (a request's media resolution is
not read), at the part's own frame rate when it sets one (``videoMetadata.fps``, carried here as
the data URL's ``fps`` parameter), over the whole file (a clip's offsets only shorten it):
never below Google's count, 7% above it at the default resolution.

The length comes from the file's own header: mutagen for audio (WAV and AIFF exactly, MP3 from
its frame headers, FLAC, OGG, AAC/M4A) and for MP4, MOV, 3GP and WMV video; WebM/Matroska from
its ``Duration`` (else its last block's time, plus a second) and AVI from its main header, read
here. A file whose length cannot be read is priced at a stated worst case: as long as its bytes
would last at ``SLOWEST_BYTES_PER_SECOND`` (6 kbit/s, below any of those formats at speech
quality or a still screen), so it is never priced short. Lengths are cached per tenant, like
the image probes and PDF readings (docs/security.md).
"""

from __future__ import annotations

import binascii
import io
import math
import re
import struct
from collections.abc import Mapping
from typing import Any

import xxhash

from pricing.lru import LRU

__all__ = [
    "AUDIO_SECOND",
    "FRAME",
    "INPUT_AUDIO_FORMAT",
    "SLOWEST_BYTES_PER_SECOND",
    "USER_AUDIO_SECOND",
    "VIDEO_SECOND",
    "audio_reference_tokens",
    "input_audio_of",
    "input_audio_url",
    "is_recording",
    "note",
    "recording_kind",
    "recording_seconds",
    "recording_tokens",
    "user_audio_tokens",
]

#: Gemini: "each second of audio as 32 tokens".
AUDIO_SECOND = 32
#: Gemini: a video frame (sampled at 1 fps unless the part says otherwise) at the dearest
#: published per-frame count (Gemini 3, high media resolution; 258 at the default).
FRAME = 280
#: Gemini: what a second of video costs besides its frames: its audio (32) and metadata, a
#: timestamp a second (the "about 300 a second" Google states, less 258 and 32).
VIDEO_SECOND = AUDIO_SECOND + 10
#: OpenAI: "audio tokens in user messages are 1 token per 100 ms of audio".
USER_AUDIO_SECOND = 10
#: What a chat ``input_audio`` part's ``format`` may be: OpenAI's reference names wav and mp3;
#: an OpenAI-compatible provider may take others, so any short name passes (the provider
#: refuses what it does not take) but nothing that would break out of the data URL's type.
INPUT_AUDIO_FORMAT = re.compile(r"[a-z0-9][a-z0-9.+-]{0,15}")
#: The least a second of audio or video can take (6 kbit/s): a file of unknown length lasts at
#: most its size over this.
SLOWEST_BYTES_PER_SECOND = 750
#: Elements of a Matroska file read at most before its length is taken as unknown.
_MAX_ELEMENTS = 200_000
#: The longest a file is priced as (116 days: over any window many times), and the highest
#: frame rate (Google's): a header or a data URL may state anything, and a price must stay a
#: number (a stated 1e300 seconds at 1e20 frames a second is no integer).
_LONGEST = 1e7
_FASTEST = 24.0

_CACHE: LRU[float] = LRU(256)


def recording_kind(url: str) -> str | None:
    """``audio`` or ``video`` for a base64 data URL of one (how the Gemini wire's inline media
    reaches pricing), else None."""
    head = url[:96].lower()
    if ";base64," not in head:
        return None
    for media in ("audio", "video"):
        if head.startswith(f"data:{media}/"):
            return media
    return None


def is_recording(url: str) -> bool:
    return recording_kind(url) is not None


def note(url: str) -> str:
    """The text that stands for a recording a route does not take (or the fit offloads):
    deterministic, so a conversation's prefix stays byte-identical turn after turn."""
    media = url[5:].partition(";")[0].lower()
    what = recording_kind(url) or "media"
    return f"[{what} omitted: {media} #{xxhash.xxh3_64_hexdigest(url.encode())[:8]}]"


def recording_tokens(url: str, scope: bytes = b"") -> int:
    """What a provider that takes audio and video counts for this file."""
    seconds = recording_seconds(url, scope)
    if recording_kind(url) == "audio":
        return math.ceil(seconds * AUDIO_SECOND)
    frames = math.ceil(seconds * _fps(url))
    return frames * FRAME + math.ceil(seconds * VIDEO_SECOND)


def user_audio_tokens(url: str, scope: bytes = b"") -> int:
    """What OpenAI counts for audio in a user message (``USER_AUDIO_SECOND``)."""
    return math.ceil(recording_seconds(url, scope) * USER_AUDIO_SECOND)


def audio_reference_tokens(provider: str, max_output_tokens: int) -> int:
    """What an assistant message's ``audio: {"id": ...}`` costs on a route: OpenAI re-reads the
    earlier audio answer it names as that answer's audio tokens, and routefit cannot know how
    long the answer was (it holds no audio by id, and a transcript says little of the speaking
    rate). An answer's audio tokens are part of its completion, which the model's output cap
    bounds: the route's ``max_output_tokens`` is the least price never below the provider's
    (docs/pricing.md, "Audio and video"). Anthropic's mapping drops the reference (its models
    take no audio), so it costs nothing there."""
    return 0 if provider == "anthropic" else max(0, max_output_tokens)


def input_audio_url(value: Any) -> str | None:
    """A chat ``input_audio`` object (``{"data": base64, "format": "wav"}``) as the data URL
    pricing reads recordings from, None when it is not one. The parser and the chat-to-Messages
    mapping both build it here, so the note one sends is the note the other priced."""
    if not isinstance(value, Mapping):
        return None
    data, fmt = value.get("data"), value.get("format")
    if not isinstance(data, str) or not isinstance(fmt, str):
        return None
    if not INPUT_AUDIO_FORMAT.fullmatch(fmt):
        return None
    return f"data:audio/{fmt};base64,{data}"


def input_audio_of(url: str) -> dict[str, str]:
    """The ``input_audio`` object an ``input_audio_url`` data URL came from: its inverse."""
    head, _, data = url.partition(",")
    return {"data": data, "format": head[len("data:audio/") :].partition(";")[0]}


def recording_seconds(url: str, scope: bytes = b"") -> float:
    """The file's length in seconds, from its header, else its worst case by size."""
    key = xxhash.xxh3_128_digest(url.encode()) + scope
    video = recording_kind(url) == "video"
    return min(_LONGEST, _CACHE.memo(key, lambda: _seconds(url.partition(",")[2], video)))


def _fps(url: str) -> float:
    """The frame rate the part asks Google to sample at (the ``fps`` parameter), else 1."""
    for param in url[5:].partition(",")[0].split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "fps":
            try:
                fps = float(value)
            except ValueError:
                break
            if math.isfinite(fps) and fps > 0:
                return min(fps, _FASTEST)
    return 1.0


def _seconds(payload: str, video: bool) -> float:
    try:
        data = binascii.a2b_base64(payload.encode())
    except (binascii.Error, ValueError):
        data = b""
    worst = len(data) / SLOWEST_BYTES_PER_SECOND
    if not data:
        return worst
    length = _read_length(data, video)
    return length if length is not None and math.isfinite(length) and length >= 0 else worst


def _read_length(data: bytes, video: bool) -> float | None:
    if video:
        if data[:4] == b"\x1a\x45\xdf\xa3":
            return _matroska_seconds(data)
        if data[:4] == b"RIFF" and data[8:12] == b"AVI ":
            return _avi_seconds(data)
    import mutagen  # a recording costs its reader's import only when one is sent

    try:
        found = mutagen.File(io.BytesIO(data))
        return float(found.info.length) if found is not None else None
    except Exception:  # any failure to read a client's file: its worst case
        return None


def _avi_seconds(data: bytes) -> float | None:
    """The main AVI header's microseconds a frame times its frames."""
    at = data.find(b"avih", 12, 4096)
    if at < 0 or len(data) < at + 28:
        return None
    per_frame, *_, frames = struct.unpack_from("<5I", data, at + 8)
    return per_frame * frames / 1e6 if per_frame and frames else None


# Matroska (WebM) element ids: the ones whose children are read, and the ones read.
_SEGMENT, _INFO, _CLUSTER, _GROUP = 0x18538067, 0x1549A966, 0x1F43B675, 0xA0
_SCALE, _DURATION, _TIMECODE, _SIMPLE_BLOCK, _BLOCK = 0x2AD7B1, 0x4489, 0xE7, 0xA3, 0xA1
_OPEN = frozenset({_SEGMENT, _INFO, _CLUSTER, _GROUP})


def _vint(data: bytes, at: int, marker: bool) -> tuple[int, int] | None:
    """(value, length) of the EBML variable-size integer at ``at``: an element id keeps its
    length marker, a size drops it (all ones: unknown, -1)."""
    if at >= len(data) or not data[at]:
        return None
    length = 9 - data[at].bit_length()
    if at + length > len(data):
        return None
    value = int.from_bytes(data[at : at + length], "big")
    if marker:
        return value, length
    value &= (1 << (7 * length)) - 1
    return (-1 if value == (1 << (7 * length)) - 1 else value), length


def _matroska_seconds(data: bytes) -> float | None:
    """The segment's ``Duration`` × ``TimecodeScale``, else the latest block's time plus a
    second (a live recording states no duration). Elements are walked flat: the children of
    the segment, its info, clusters and block groups are read in place, which also serves
    their unknown sizes."""
    scale, duration, cluster, latest = 1_000_000, None, 0, None
    at = 0
    for _ in range(_MAX_ELEMENTS):
        ident = _vint(data, at, marker=True)
        size = _vint(data, at + ident[1], marker=False) if ident else None
        if ident is None or size is None:
            break
        body = at + ident[1] + size[1]
        if ident[0] in _OPEN:
            at = body
            continue
        if size[0] < 0 or body + size[0] > len(data):
            break
        value = data[body : body + size[0]]
        if ident[0] == _SCALE:
            scale = int.from_bytes(value, "big") or scale
        elif ident[0] == _DURATION and len(value) in (4, 8):
            duration = float(struct.unpack(">f" if len(value) == 4 else ">d", value)[0])
        elif ident[0] == _TIMECODE:
            cluster = int.from_bytes(value, "big")
        elif ident[0] in (_SIMPLE_BLOCK, _BLOCK):
            track = _vint(value, 0, marker=False)
            if track is not None and len(value) >= track[1] + 2:
                offset = struct.unpack_from(">h", value, track[1])[0]
                latest = max(latest or 0, cluster + offset)
        at = body + size[0]
    if duration is not None:
        return duration * scale / 1e9
    return None if latest is None else latest * scale / 1e9 + 1.0
