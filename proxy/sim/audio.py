"""Audio as the simulated Gemini reads it: 32 tokens a second (Google's published rate), the
length from the file's header (mutagen); a file it cannot read is refused, as Google refuses it.
"""

from __future__ import annotations

import binascii
import io
import math
from functools import lru_cache

__all__ = ["PER_SECOND", "audio_seconds"]

PER_SECOND = 32


@lru_cache(maxsize=16)  # a test tool: the keys are whole base64 files
def audio_seconds(data: str) -> float | None:
    """The length of base64 audio in seconds; None when it is not audio the reader knows."""
    try:
        raw = binascii.a2b_base64(data.encode())
    except (binascii.Error, ValueError):
        return None
    import mutagen

    try:
        found = mutagen.File(io.BytesIO(raw))
    except Exception:  # a file the reader fails on is a file the provider refuses
        return None
    length = float(found.info.length) if found is not None else -1.0
    return length if math.isfinite(length) and length > 0 else None
