"""PDF documents as a route counts them: each page's text, and each page as a picture.

Anthropic (a ``document`` block) and OpenAI (a chat ``file`` part, a Responses ``input_file``)
take a base64 PDF and put two things in the prompt for every page: the text extracted from it
and a picture of it; Gemini (an ``inlineData`` part) the picture only (docs/pricing.md, "PDF
documents", with the sources). Priced as what it is on the wire — base64 — a scanned page of
550 KB came to 518,028 tokens where the simulator counts 1,334, and requests that fit were
refused; priced as a note (the Gemini wire), a PDF was nearly free. So a document is priced as

    its extracted text, counted by the route's tokenizer (``Document.text``; not on a rule in
    ``GOOGLE_KINDS``: Google counts a page as its picture), plus
    ``pages`` × the route's price of one image of unknown size (``page_tokens``),

the text as text (calibration scales it like any other), the pictures apart, at the worst
case, which calibration never lowers (``MessagePressure.unsized``): a page picture's size is
the provider's rendering, which routefit cannot see.

Reading a PDF is the one costly step (pypdf: ~1 ms to open, ~5 ms a page of text), so a
document is read once per tenant (the cache's key holds the route's scope, as the image
probes' do: docs/security.md), and a conversation re-sent every turn costs a digest of its
base64 (xxh3, as the meter's memo keys). What routefit cannot read (not base64, not a PDF,
password-protected, past the reading bounds of ``_text``, over ``MAX_PAGES``, or
``MAX_PAGES_PICTURED`` where pages alone are priced) is priced as its base64 text; the provider
has the last word.
"""

from __future__ import annotations

import binascii
import io
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import xxhash

from pricing.content import PROSE, classify, profile
from pricing.images.kinds import GeminiTile
from pricing.images.rule import ImageRule
from pricing.lru import LRU
from pricing.tokenizers import get_tokenizer

__all__ = [
    "FILE_CHARS",
    "FILE_OPERATIONS",
    "MAX_PAGES",
    "MAX_PAGES_PICTURED",
    "MEDIA_TYPE",
    "PAGE_CHARS",
    "PAGE_TOKENS",
    "Document",
    "Facts",
    "document_facts",
    "file_data",
    "is_document",
    "page_tokens",
    "read_document",
]

MEDIA_TYPE = "application/pdf"
_PREFIX = f"data:{MEDIA_TYPE};base64,"

#: Pages whose text is read at most (Anthropic's and OpenAI's limit is 100); a longer PDF is
#: priced as its base64 text rather than holding a worker for seconds of text extraction.
MAX_PAGES = 100
#: Text read at most from one page (a dense page holds ~6,000 characters) and from one file
#: (~250,000 tokens, more than a window leaves for one document): past either (or past
#: ``FILE_OPERATIONS``), the file is not read (``_text``) and is priced as its base64.
PAGE_CHARS = 40_000
FILE_CHARS = 1_000_000
#: Drawing operations read at most from one file: 100 pages of 600 (a text page written by
#: fpdf2 has ~250, each ~15 µs to read).
FILE_OPERATIONS = 60_000
#: pypdf's own bounds, tightened for files a client sends: what one stream may inflate to and
#: how much parsing one content stream may cost (its defaults: 75 MB and 2 million elements).
_LIMITS = {
    "zlib_maximum_output_length": 16_000_000,
    "lzw_maximum_output_length": 16_000_000,
    "run_length_maximum_output_length": 16_000_000,
    "brotli_maximum_output_length": 16_000_000,
    "stream_parsing_work_maximum_count": 100_000,
    "xform_maximum_invocations_per_extraction": 1_000,
}
#: Pages counted at most where only pages are priced (``GOOGLE_KINDS``: Google takes up to
#: 1,000); counting them costs ~0.05 ms a page, reading no text.
MAX_PAGES_PICTURED = 1000


@dataclass(frozen=True, slots=True)
class Document:
    """A PDF as read."""

    pages: int
    #: The pages' extracted text, one line break between pages.
    text: str


@dataclass(frozen=True, slots=True)
class Facts:
    """What pricing keeps of a PDF for one tokenizer: its pages, and its text's token count,
    content class and ``content.profile`` (the features calibration reads of any text). The
    cache holds these, not the text: 256 readings of 100-page files would hold ~75 MB of it."""

    pages: int
    tokens: int = 0
    text_class: int = PROSE
    stats: tuple[int, ...] = ()


#: What cannot be read is remembered too (``Facts(0)``), so a bad file costs one attempt.
_CACHE: LRU[Facts] = LRU(256)


#: A page's picture where the image rule has no upper bound (its tiles grow with the image):
#: Gemini 2.x counts each document page as 258 tokens (docs/pricing.md, "PDF documents").
PAGE_TOKENS = {GeminiTile.kind: 258}


def page_tokens(rule: ImageRule, detail: str, max_image_tokens: int) -> int:
    """What one page's picture may cost: the rule's worst case for one image, else a stated
    price per page, else the route's limit for one image."""
    worst = rule.worst_case(detail)
    if worst is not None:
        return worst
    return PAGE_TOKENS.get(rule.kind, max_image_tokens)


def is_document(url: str) -> bool:
    """A base64 PDF data URL (how every wire's PDF reaches pricing)."""
    return url[: len(_PREFIX)].lower() == _PREFIX


def file_data(file: Any) -> str | None:
    """The PDF data URL a chat ``file`` part's object carries (its ``file_data``), if any."""
    data = file.get("file_data") if isinstance(file, Mapping) else None
    return data if isinstance(data, str) and is_document(data) else None


def document_facts(
    url: str, tokenizer: str, scope: bytes = b"", *, text: bool = True
) -> Facts | None:
    """The PDF in a data URL as ``tokenizer`` counts its text (``text`` False: its pages only);
    None when it cannot be read. Read once per tenant (``scope``), tokenizer and kind; again, it
    costs a digest of the URL."""
    kind = tokenizer.encode() if text else b"\0pages"
    key = xxhash.xxh3_128_digest(url.encode()) + kind + b"\0" + scope

    def read() -> Facts:
        document = read_document(url, text=text)
        if document is None:
            return Facts(0)
        if not text:
            return Facts(document.pages)
        words, tok = document.text, get_tokenizer(tokenizer, scope)
        return Facts(document.pages, tok.count(words), classify(words), profile(words))

    found = _CACHE.memo(key, read)
    return found if found.pages else None


def read_document(url: str, *, text: bool = True) -> Document | None:
    """The PDF in a data URL (``text`` False: its pages counted, no text read), or None when
    it cannot be read as one (not cached: see ``document_facts``)."""
    return _read(url[len(_PREFIX) :], text)


def _read(payload: str, text: bool) -> Document | None:
    try:
        data = binascii.a2b_base64(payload.encode())
    except (binascii.Error, ValueError):
        return None
    if not data.startswith(b"%PDF-"):
        return None
    import pypdf  # a PDF costs its reader's import (~40 ms) only when one is sent

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings are about the file
    try:
        with pypdf.apply_configuration(None, **_LIMITS):
            reader = pypdf.PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted and not reader.decrypt(""):  # an owner password alone opens
                return None
            pages = len(reader.pages)
            if not 0 < pages <= (MAX_PAGES if text else MAX_PAGES_PICTURED):
                return None
            words = _text(reader.pages) if text else ""
    except Exception:  # any failure to read a client's file (a limit too) means "cannot read it"
        return None
    return Document(pages, words)


class _TooMuchText(Exception):
    """A page or a file past the text budget: extraction stops (``_text``)."""


def _text(pages: Any) -> str:
    """The pages' text, within ``PAGE_CHARS`` a page, ``FILE_CHARS`` and ``FILE_OPERATIONS`` in
    all. pypdf reads 15-50 µs a drawing operation, pure Python, and slows with the square of a
    page's text: without these bounds a 25 KB file of one page of 200,000 operations took 55 s
    here (2.2 million characters), a 2 KB file of 100 pages of 3,000 operations 5 s."""
    seen = [0, 0, 0]  # this page's characters, the file's, the file's operations

    def text(chunk: str, *_: Any) -> None:
        seen[0] += len(chunk)
        seen[1] += len(chunk)
        if seen[0] > PAGE_CHARS or seen[1] > FILE_CHARS:
            raise _TooMuchText

    def operation(*_: Any) -> None:
        seen[2] += 1
        if seen[2] > FILE_OPERATIONS:
            raise _TooMuchText

    texts: list[str] = []
    for page in pages:
        seen[0] = 0
        texts.append(page.extract_text(visitor_text=text, visitor_operand_before=operation) or "")
    return "\n".join(texts)
