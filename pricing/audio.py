"""Audio as a route counts it: its seconds at the provider's rate, where the provider takes it.

Gemini takes audio inline (``inlineData`` of an ``audio/*`` type: WAV, MP3, AIFF, AAC, OGG
Vorbis, FLAC) and counts 32 tokens a second of it (docs/pricing.md, "Audio"). Priced as a
one-line note, as it was, a five-minute recording (9,600 tokens at Google) cost about 15. No
chat route routefit translates to takes audio, so there it is sent, and priced, as its
placeholder text.

The length comes from the file's own header (mutagen: WAV and AIFF exactly, MP3 from its frame
headers, FLAC, OGG and AAC/M4A from their stream info). A file whose length cannot be read is
priced at a stated worst case: as long as its bytes would last at ``SLOWEST_BYTES_PER_SECOND``
(6 kbit/s, below any of those formats at speech quality), so it is never priced short. Lengths
are cached per tenant, like the image probes and PDF readings (docs/security.md).
"""

from __future__ import annotations

import binascii
import io
import math

import xxhash

from pricing.lru import LRU

__all__ = [
    "PER_SECOND",
    "SLOWEST_BYTES_PER_SECOND",
    "audio_seconds",
    "audio_tokens",
    "is_audio",
    "note",
]

#: Gemini: "each second of audio as 32 tokens".
PER_SECOND = 32
#: The least a second of audio can take (6 kbit/s): a file of unknown length lasts at most
#: its size over this.
SLOWEST_BYTES_PER_SECOND = 750

_CACHE: LRU[float] = LRU(256)


def is_audio(url: str) -> bool:
    """A base64 audio data URL (how the Gemini wire's inline audio reaches pricing)."""
    head = url[:64].lower()
    return head.startswith("data:audio/") and ";base64," in head


def note(url: str) -> str:
    """The text that stands for an audio file a route does not take (or the fit offloads):
    deterministic, so a conversation's prefix stays byte-identical turn after turn."""
    media = url[5:].partition(";")[0].lower()
    return f"[audio omitted: {media} #{xxhash.xxh3_64_hexdigest(url.encode())[:8]}]"


def audio_tokens(url: str, scope: bytes = b"") -> int:
    """What a provider that takes audio counts for this file."""
    return math.ceil(audio_seconds(url, scope) * PER_SECOND)


def audio_seconds(url: str, scope: bytes = b"") -> float:
    """The file's length in seconds, from its header, else its worst case by size."""
    key = xxhash.xxh3_128_digest(url.encode()) + scope
    return _CACHE.memo(key, lambda: _seconds(url.partition(",")[2]))


def _seconds(payload: str) -> float:
    try:
        data = binascii.a2b_base64(payload.encode())
    except (binascii.Error, ValueError):
        data = b""
    worst = len(data) / SLOWEST_BYTES_PER_SECOND
    if not data:
        return worst
    import mutagen  # audio costs its reader's import only when some is sent

    try:
        found = mutagen.File(io.BytesIO(data))
        length = float(found.info.length) if found is not None else -1.0
    except Exception:  # any failure to read a client's file: its worst case
        return worst
    return length if math.isfinite(length) and length >= 0 else worst
