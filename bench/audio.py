"""What a chat ``input_audio`` part is priced at, beside the simulator's count of it.

For each clip (WAV at three sample rates, MP3 at two bitrates made by a real FFmpeg, and bytes
whose length no reader finds) and each route kind, the tokens of the audio alone: ``sim`` as the
simulator counts it (the prompt with the part minus the prompt without it: a token per 100 ms on
its audio model, ``gpt-audio-sim``), ``now`` as the meter prices it (``pricing.recordings``: the
length from the file's header at OpenAI's 10 tokens a second; an Anthropic route its note),
``read ms``: the length read the first time and again (the tenant's cached reading). Before
2026-12-06 every such part was refused with 400. ``python bench/audio.py``; in-process, no
network (FFmpeg from the imageio-ffmpeg wheel the tests use).
"""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import imageio_ffmpeg

from pricing.framing import Framing
from pricing.images import text_only
from pricing.messages import parse_request
from pricing.meter import price_image
from pricing.recordings import recording_seconds
from pricing.route import Route
from proxy.sim.counting import openai_prompt
from proxy.sim.models import get_builtin

AUDIO_ROUTE = Route(
    alias="voice",
    model="gpt-audio",
    context_window=128_000,
    max_output_tokens=16_384,
    tokenizer="o200k_base",
    framing=Framing(family="generic"),
    image_rule=text_only(),
)
ANTHROPIC_ROUTE = replace(AUDIO_ROUTE, provider="anthropic", model="claude-sonnet-4-5")


def wav(seconds: float, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(2 * int(seconds * rate)))
    return out.getvalue()


def mp3(seconds: float, bitrate: str) -> bytes:
    """A tone of ``seconds`` encoded by FFmpeg at ``bitrate``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "clip.mp3"
        source = f"sine=frequency=440:duration={seconds}"
        command = [imageio_ffmpeg.get_ffmpeg_exe(), "-loglevel", "error", "-f", "lavfi"]
        command += ["-i", source, "-b:a", bitrate, str(path)]
        subprocess.run(command, check=True)
        return path.read_bytes()


def _part(raw: bytes, fmt: str) -> dict[str, Any]:
    audio = {"data": base64.b64encode(raw).decode(), "format": fmt}
    return {"type": "input_audio", "input_audio": audio}


def _sim(part: dict[str, Any]) -> int | None:
    """The simulator's tokens for the audio alone (None: it cannot read the file's length)."""
    from proxy.sim.recordings import seconds

    if seconds(part["input_audio"]["data"]) is None:
        return None  # the simulated provider refuses it
    model = get_builtin("gpt-audio-sim")
    text = {"type": "text", "text": "x"}
    with_part = {"messages": [{"role": "user", "content": [part, text]}]}
    without = {"messages": [{"role": "user", "content": [text]}]}
    return (
        openai_prompt(with_part, model, _no_images).total
        - openai_prompt(without, model, _no_images).total
    )


def _no_images(part: Any) -> Any:
    raise AssertionError("no images here")


def main() -> None:
    clips = [
        ("wav 8 kHz, 30 s", wav(30, 8000), "wav"),
        ("wav 16 kHz, 5 min", wav(300, 16000), "wav"),
        ("wav 44.1 kHz, 61.5 s", wav(61.5, 44100), "wav"),
        ("mp3 32 kbit/s, 2 min", mp3(120, "32k"), "mp3"),
        ("mp3 128 kbit/s, 45 s", mp3(45, "128k"), "mp3"),
        ("unreadable, 96 KB", bytes(range(256)) * 384, "mp3"),
    ]
    print("| clip | KB | seconds read | sim | now (audio route) | now ÷ sim | Anthropic route "
          "(its note) | read ms (first / again) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for i, (name, raw, fmt) in enumerate(clips):
        part = _part(raw, fmt)
        (message,) = parse_request({"messages": [{"role": "user", "content": [part]}]}).messages
        (image,) = message.images
        scope = f"bench-{i}".encode()
        start = time.perf_counter()
        length = recording_seconds(image.url, scope)
        first = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        recording_seconds(image.url, scope)
        again = (time.perf_counter() - start) * 1e3
        now = price_image(image, replace(AUDIO_ROUTE, scope=scope), None).tokens
        note = price_image(image, replace(ANTHROPIC_ROUTE, scope=scope), None).tokens
        sim = _sim(part)
        shown = "refused (400)" if sim is None else f"{sim:,}"
        ratio = "—" if sim is None else f"{now / sim:.2f}"
        print(
            f"| {name} | {len(raw) // 1024} | {length:.1f} | {shown} | {now:,} | {ratio} | "
            f"{note} | {first:.2f} / {again:.3f} |"
        )


if __name__ == "__main__":
    main()
