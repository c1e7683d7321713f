"""PDF documents as the simulated providers read them: each page's text and a picture of it.

The rule (docs/simulator.md): a page costs the tokens of its text (pypdf's plain extraction,
counted by the model's tokenizer) plus the model's image rule applied to the page rendered at
``DPI`` (its media box in points × DPI / 72). A file that is not a readable PDF is refused, as
the providers refuse it. Pages are read once per file (the simulator re-counts every prompt).
"""

from __future__ import annotations

import binascii
import hashlib
import io
import logging
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["DPI", "Page", "pdf_pages"]

#: The resolution pages are rendered at before the model's image rule resizes them.
DPI = 150


@dataclass(frozen=True)
class Page:
    text: str
    width: int
    height: int
    #: Distinct pages → distinct image token prefixes (what the prompt cache keys on).
    key: str


@lru_cache(maxsize=16)  # a test tool: the keys are whole base64 files
def pdf_pages(data: str) -> tuple[Page, ...] | None:
    """The pages of a base64 PDF; None when it is not one the simulator can read."""
    try:
        raw = binascii.a2b_base64(data.encode())
    except (binascii.Error, ValueError):
        return None
    if not raw.startswith(b"%PDF-"):
        return None
    import pypdf

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    digest = hashlib.sha256(raw).hexdigest()
    try:
        reader = pypdf.PdfReader(io.BytesIO(raw), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            return None  # password-protected: refused
        pages = []
        for i, page in enumerate(reader.pages):
            box = page.mediabox
            width = max(1, round(float(box.width) * DPI / 72))
            height = max(1, round(float(box.height) * DPI / 72))
            key = hashlib.sha256(f"{digest}:{i}".encode()).hexdigest()
            pages.append(Page(page.extract_text() or "", width, height, key))
    except Exception:  # a file the reader fails on is a file the provider refuses
        return None
    return tuple(pages) if pages else None
