"""A PDF is priced as its pages: each page's text by the route's tokenizer, each page as an
image of unknown size (pricing.documents, docs/pricing.md "PDF documents")."""

from __future__ import annotations

import io
from dataclasses import replace

import pypdf
import pytest
from gpt4o_route import gpt4o_route
from media_files import b64, scanned_pdf, text_pdf
from pypdf.generic import DecodedStreamObject, NameObject

from pricing import documents
from pricing.content import classify, profile
from pricing.documents import MAX_PAGES, PAGE_TOKENS, document_facts, read_document
from pricing.images import default_image_rule, parse_image_rule
from pricing.messages import ImagePart
from pricing.meter import price_image
from pricing.probe import placeholder
from pricing.route import Route
from pricing.tokenizers import get_tokenizer


def _route(vision: bool = True) -> Route:
    """A 200k route (o200k text) with Claude's image rule, or one that takes no images."""
    route = gpt4o_route(200_000, vision=vision)
    return replace(route, image_rule=default_image_rule("claude", True)) if vision else route


def _url(data: bytes) -> str:
    return f"data:application/pdf;base64,{b64(data)}"


def test_a_pdf_is_read_for_its_pages_and_their_text() -> None:
    data = text_pdf(3, words=50, seed=7)
    found = read_document(_url(data))
    assert found is not None
    reader = pypdf.PdfReader(io.BytesIO(data))
    assert found.pages == 3
    assert found.text == "\n".join(p.extract_text() for p in reader.pages)


def _encrypted(user: str = "secret", algorithm: str = "AES-256") -> bytes:
    writer = pypdf.PdfWriter()
    writer.add_blank_page(612, 792)
    writer.encrypt(user_password=user, owner_password="owner", algorithm=algorithm)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-128", "AES-256"])
def test_a_pdf_locked_by_an_owner_password_alone_is_read(algorithm: str) -> None:
    """Most "encrypted" PDFs restrict only printing or copying: any reader opens them (AES needs
    pypdf's ``crypto`` extra, a dependency)."""
    found = read_document(_url(_encrypted(user="", algorithm=algorithm)))
    assert found is not None and found.pages == 1


@pytest.mark.parametrize(
    "payload",
    [
        "not base64 at all!",
        b64(b"GIF89a not a pdf"),
        b64(b"%PDF-1.4 truncated nonsense"),
        b64(_encrypted()),
        b64(text_pdf(MAX_PAGES + 1, words=1)),
    ],
    ids=["not-base64", "not-a-pdf", "broken", "password", "too-many-pages"],
)
def test_what_cannot_be_read_is_none(payload: str) -> None:
    assert read_document(f"data:application/pdf;base64,{payload}") is None


def test_a_document_is_read_once_per_tenant_and_tokenizer() -> None:
    url = _url(text_pdf(1, words=20, seed=11))
    misses = documents._CACHE.misses
    first = document_facts(url, "o200k_base", b"team-a")
    assert document_facts(url, "o200k_base", b"team-a") == first
    assert documents._CACHE.misses == misses + 1
    document_facts(url, "o200k_base", b"team-b")  # never another tenant's reading
    document_facts(url, "cl100k_base", b"team-a")  # nor another tokenizer's count
    assert documents._CACHE.misses == misses + 3
    found = read_document(url)
    assert found is not None and first is not None
    assert first.tokens == get_tokenizer("o200k_base").count(found.text)


def test_the_price_is_every_page_at_the_worst_case_plus_the_text() -> None:
    route = _route()
    data = text_pdf(4, words=80, seed=3)
    price = price_image(ImagePart(_url(data)), route, None)
    found = read_document(_url(data))
    assert found is not None
    worst = route.image_rule.worst_case("auto")
    assert worst is not None
    assert price.tokens == 4 * worst
    assert price.text == get_tokenizer("o200k_base").count(found.text) > 0
    # the text's features, as calibration reads them of any text part
    assert (price.text_class, price.text_stats) == (classify(found.text), profile(found.text))
    assert not price.sized  # calibration never prices the pictures below the worst case


def test_a_scanned_pdf_costs_its_pages_not_its_bytes() -> None:
    route = _route()
    url = _url(scanned_pdf(2, side=600))
    price = price_image(ImagePart(url), route, None)
    assert price.tokens + price.text <= 2 * 2000
    assert get_tokenizer("o200k_base").count(url) > 50 * (price.tokens + price.text)


def test_an_unreadable_pdf_is_priced_as_its_base64() -> None:
    url = "data:application/pdf;base64," + b64(b"%PDF-1.4 " + bytes(range(256)) * 40)
    price = price_image(ImagePart(url), _route(), None)
    assert price.tokens == 0
    assert price.text == get_tokenizer("o200k_base").count(url)


def test_a_text_only_route_gets_a_stable_placeholder() -> None:
    url = _url(text_pdf(1, words=20))
    price = price_image(ImagePart(url), _route(vision=False), None)
    assert price.placeholder == placeholder(None, url)
    assert price.placeholder.startswith("[document omitted: application/pdf #")


def test_where_only_pages_count_a_longer_pdf_is_priced_by_its_pages() -> None:
    """Google takes up to 1,000 pages and counts each as its picture: routefit counts the pages
    there (no text read), where a route that reads the text stops at 100."""
    gemini = replace(_route(), image_rule=parse_image_rule("gemini-tile"))
    url = _url(text_pdf(MAX_PAGES + 20, words=2))
    price = price_image(ImagePart(url), gemini, None)
    assert (price.tokens, price.text) == ((MAX_PAGES + 20) * PAGE_TOKENS["gemini-tile"], 0)
    assert read_document(url) is None  # too many pages to read the text of
    read = read_document(url, text=False)
    assert read is not None and read.pages == MAX_PAGES + 20 and read.text == ""


def _one_page_of(operations: int) -> bytes:
    """A small file whose one page draws ``operations`` short strings (a parser's slow path)."""
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(text_pdf(1, words=5))))
    page = writer.pages[0]
    font = next(iter(page["/Resources"]["/Font"]))
    content = DecodedStreamObject()
    content.set_data(f"BT {font} 12 Tf 10 10 Td (hello world) Tj ET\n".encode() * operations)
    page[NameObject("/Contents")] = writer._add_object(content.flate_encode())
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_file_past_the_reading_bounds_is_not_read() -> None:
    """A few KB can hold a page whose text pypdf takes a minute to extract: past the bounds on
    a page's text and a file's operations it is priced as its base64 instead."""
    small = _one_page_of(20_000)  # 220,000 characters on one page, in 4 KB
    assert len(small) < 8_000
    assert read_document(_url(small)) is None


def test_an_ordinary_long_file_is_read_within_the_bounds() -> None:
    found = read_document(_url(text_pdf(60, words=300, seed=2)))
    assert found is not None and found.pages == 60 and len(found.text) > 60 * 1_000
