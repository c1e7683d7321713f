"""Files for the media tests: PDFs of text pages (fpdf2) and of scanned pages (Pillow), WAV
audio (the standard library), videos (FFmpeg, from the imageio-ffmpeg wheel), HEIC photos
(pillow-heif) and base64."""

from __future__ import annotations

import base64
import io
import random
import subprocess
import tempfile
import wave
from functools import cache
from pathlib import Path

import imageio_ffmpeg
import pillow_heif
from fpdf import FPDF
from PIL import Image

WORDS = (
    "alpha beta gamma delta token window budget request provider route cache page text "
    "invoice total amount 2026 report section figure table summary result"
).split()


def text_pdf(pages: int, words: int = 300, seed: int = 1, size: str = "A4") -> bytes:
    """``pages`` pages of ``words`` random words and numbers each."""
    rnd = random.Random(seed)
    doc = FPDF(format=size)
    doc.set_font("helvetica", size=10)
    for _ in range(pages):
        doc.add_page()
        line = " ".join(f"{rnd.choice(WORDS)}{rnd.randint(0, 999)}" for _ in range(words))
        doc.multi_cell(0, 5, line)
    return bytes(doc.output())


def scanned_pdf(pages: int, side: int = 1400, seed: int = 1) -> bytes:
    """``pages`` pages that are only pictures (noise: large, incompressible, no text)."""
    rnd = random.Random(seed)
    images = [
        Image.frombytes("L", (side, side), rnd.randbytes(side * side)).convert("RGB")
        for _ in range(pages)
    ]
    out = io.BytesIO()
    images[0].save(out, format="PDF", save_all=True, append_images=images[1:], resolution=150)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def document_block(data: bytes) -> dict:
    """An Anthropic ``document`` block carrying the PDF."""
    return {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": b64(data)},
    }


def wav(seconds: float, rate: int = 8000) -> bytes:
    """A mono 8-bit WAV of silence lasting ``seconds`` (its header states its length)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(rate)
        w.writeframes(bytes([128]) * int(seconds * rate))
    return out.getvalue()


@cache
def video(seconds: int, suffix: str = "mp4", *args: str) -> bytes:
    """A test-pattern video of ``seconds`` at 5 frames a second, in the container ``suffix``
    names, made by a real FFmpeg (``args``: more of its output options, e.g. a live WebM's)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"clip.{suffix}"
        pattern = f"testsrc=duration={seconds}:size=160x120:rate=5"
        command = [imageio_ffmpeg.get_ffmpeg_exe(), "-loglevel", "error", "-f", "lavfi"]
        subprocess.run([*command, "-i", pattern, *args, str(out)], check=True, timeout=120)
        return out.read_bytes()


def heic(width: int, height: int, seed: int = 1) -> bytes:
    """A HEIC photo of noise, as an iPhone would send it to Gemini."""
    pixels = random.Random(seed).randbytes(width * height * 3)
    out = io.BytesIO()
    pillow_heif.from_pillow(Image.frombytes("RGB", (width, height), pixels)).save(out, quality=40)
    return out.getvalue()
