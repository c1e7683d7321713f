"""Audio and video as the simulated providers read them. OpenAI's audio models: a chat
``input_audio`` part at a token per 100 ms (its Realtime costs guide's rate for user audio).
Gemini, by Google's published rates: audio 32
tokens a second; video a frame a second (or at the part's ``videoMetadata.fps``) at 258 tokens,
plus 32 of its audio and 10 of metadata a second ("about 300 tokens a second"). The length is
read from the file's header (mutagen; a WebM's ``Duration`` by its element id); a file it cannot
read is refused, as Google refuses it.
"""

from __future__ import annotations

import binascii
import io
import math
import struct
from functools import lru_cache

__all__ = [
    "AUDIO_SECOND",
    "FRAME",
    "USER_AUDIO_SECOND",
    "VIDEO_SECOND",
    "seconds",
    "video_tokens",
]

AUDIO_SECOND = 32
#: OpenAI: "audio tokens in user messages are 1 token per 100 ms of audio".
USER_AUDIO_SECOND = 10
FRAME = 258
VIDEO_SECOND = AUDIO_SECOND + 10

_EBML = b"\x1a\x45\xdf\xa3"


@lru_cache(maxsize=16)  # a test tool: the keys are whole base64 files
def seconds(data: str) -> float | None:
    """The length of base64 audio or video in seconds; None when the reader does not know it."""
    try:
        raw = binascii.a2b_base64(data.encode())
    except (binascii.Error, ValueError):
        return None
    length = _webm(raw) if raw[:4] == _EBML else _mutagen(raw)
    return length if length is not None and math.isfinite(length) and length > 0 else None


def video_tokens(length: float, fps: float = 1.0) -> int:
    return math.ceil(length * fps) * FRAME + math.ceil(length * VIDEO_SECOND)


def _mutagen(raw: bytes) -> float | None:
    import mutagen

    try:
        found = mutagen.File(io.BytesIO(raw))
    except Exception:  # a file the reader fails on is a file the provider refuses
        return None
    return float(found.info.length) if found is not None else None


def _webm(raw: bytes) -> float | None:
    """``Duration`` (an 8- or 4-byte float) × ``TimecodeScale`` (ns, 1 ms unless stated)."""
    scale = 1_000_000
    at = raw.find(b"\x2a\xd7\xb1")
    if at >= 0 and at + 4 < len(raw) and raw[at + 3] & 0xF0 == 0x80:
        width = raw[at + 3] & 0x0F
        scale = int.from_bytes(raw[at + 4 : at + 4 + width], "big") or scale
    for size, fmt in ((0x88, ">d"), (0x84, ">f")):
        at = raw.find(bytes([0x44, 0x89, size]))
        if at >= 0 and at + 3 + (size & 0x0F) <= len(raw):
            return float(struct.unpack_from(fmt, raw, at + 3)[0]) * scale / 1e9
    return None
