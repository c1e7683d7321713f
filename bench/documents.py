"""What a PDF is priced at, before (its block's JSON) and now (its pages), beside the simulator.

For each PDF and each wire's model, the tokens of the document alone (the prompt with it minus
the prompt without it): ``sim`` as the simulator counts it (each page's text and a picture of
the page by the model's rule; Gemini 258 a page), ``before`` as routefit priced it until
2026-12-05 (the compact JSON of the block, i.e. its base64, by the route's tokenizer; on the
Gemini wire a one-line note), ``now`` as the meter prices it (``pricing.documents``: the text,
plus every page at the rule's worst case). ``read ms``: reading the PDF the first time (pypdf),
and again (a digest: the tenant's cached reading).

The text PDFs are this repository's own docs rendered page by page (fpdf2), the scanned ones
pages of noise (JPEG, incompressible, no text). ``python bench/documents.py``; in-process, no
network.
"""

from __future__ import annotations

import base64
import io
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson
from fpdf import FPDF
from PIL import Image

from pricing.documents import document_facts
from pricing.framing import Framing
from pricing.images import default_image_rule, parse_image_rule
from pricing.messages import ImagePart
from pricing.meter import price_image
from pricing.route import Route
from pricing.tokenizers import get_tokenizer
from proxy.sim.counting import anthropic_prompt, gemini_prompt, openai_prompt
from proxy.sim.models import get_builtin


def _latin1(text: str) -> str:
    return text.encode("latin-1", "replace").decode("latin-1")


def text_pdf(path: Path) -> bytes:
    doc = FPDF(format="A4")
    doc.set_font("helvetica", size=9)
    doc.add_page()
    doc.multi_cell(0, 4, _latin1(path.read_text()))
    return bytes(doc.output())


def scanned_pdf(pages: int, side: int = 1000) -> bytes:
    rnd = random.Random(pages)
    images = [
        Image.frombytes("L", (side, side), rnd.randbytes(side * side)).convert("RGB")
        for _ in range(pages)
    ]
    out = io.BytesIO()
    images[0].save(out, format="PDF", save_all=True, append_images=images[1:], resolution=150)
    return out.getvalue()


def _route(model: str, tokenizer: str, rule: Any) -> Route:
    return Route(
        alias=model,
        model=model,
        provider=model.split("/")[0],
        context_window=1_000_000,
        max_output_tokens=4096,
        tokenizer=tokenizer,
        framing=Framing(family="generic"),
        image_rule=rule,
        supports_vision=True,
    )


def _no_pictures(part: Any) -> Any:
    raise AssertionError("no images in these prompts")


def _sim(wire: str, data: str, url: str) -> int:
    """The simulator's tokens for the document alone, on ``wire``'s model."""
    text: dict[str, Any] = {"type": "text", "text": "x"}
    if wire == "messages":
        source = {"type": "base64", "media_type": "application/pdf", "data": data}
        doc: dict[str, Any] = {"type": "document", "source": source}
        count, model, key, inner = anthropic_prompt, "claude-sim", "messages", "content"
    elif wire == "chat":
        doc = {"type": "file", "file": {"filename": "d.pdf", "file_data": url}}
        count, model, key, inner = openai_prompt, "gpt-4o", "messages", "content"
    else:
        doc = {"inlineData": {"mimeType": "application/pdf", "data": data}}
        text = {"text": "x"}
        count, model, key, inner = gemini_prompt, "gemini-sim", "contents", "parts"
    m = get_builtin(model)
    with_doc = {key: [{"role": "user", inner: [doc, text]}]}
    without = {key: [{"role": "user", inner: [text]}]}
    return count(with_doc, m, _no_pictures).total - count(without, m, _no_pictures).total


ROUTES = {
    "messages": _route(
        "anthropic/claude-sim", "anthropic-legacy", default_image_rule("claude", True)
    ),
    "chat": _route("openai/gpt-4o", "o200k_base", default_image_rule("gpt-4o", True)),
    "gemini": _route("gemini/gemini-sim", "o200k_base", parse_image_rule("gemini-tile")),
}


def _before(wire: str, data: str, route: Route) -> int:
    tok = get_tokenizer(route.tokenizer)
    if wire == "gemini":
        return tok.count("[application/pdf content omitted: this route takes text and images]")
    block = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                            "data": data}}  # fmt: skip
    if wire == "chat":
        return 0  # refused: a chat `file` part was not a supported content part
    return tok.count(orjson.dumps(block, option=orjson.OPT_SORT_KEYS).decode())


def main() -> None:
    pdfs = [(f"{name} (text)", text_pdf(ROOT / "docs" / name)) for name in
            ("pricing.md", "wires.md", "fitting.md")]  # fmt: skip
    pdfs += [(f"scanned x{n}", scanned_pdf(n)) for n in (1, 3, 8)]
    print("| PDF | pages | KB | wire | sim | before | now | now ÷ sim | read ms (first / again) |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---|")
    for i, (name, raw) in enumerate(pdfs):
        data = base64.b64encode(raw).decode()
        url = f"data:application/pdf;base64,{data}"
        for wire, route in ROUTES.items():
            scope = f"bench-{i}-{wire}".encode()
            start = time.perf_counter()
            found = document_facts(url, route.tokenizer, scope)
            first = (time.perf_counter() - start) * 1e3
            start = time.perf_counter()
            document_facts(url, route.tokenizer, scope)
            again = (time.perf_counter() - start) * 1e3
            assert found is not None
            price = price_image(ImagePart(url), route, None)
            now = price.tokens + price.text
            sim = _sim(wire, data, url)
            before = _before(wire, data, route)
            shown = "refused (400)" if wire == "chat" else f"{before:,}"
            print(
                f"| {name} | {found.pages} | {len(raw) // 1024} | {wire} | {sim:,} | {shown} | "
                f"{now:,} | {now / sim:.2f} | {first:.1f} / {again:.2f} |"
            )


if __name__ == "__main__":
    main()
