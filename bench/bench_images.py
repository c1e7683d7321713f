"""Benchmark: probing and pricing the images of a request, cold and warm.

    python bench/bench_images.py [--images 50] [--repeat 7]

Builds one chat request carrying 50 base64 images of mixed formats and sizes up to 4000x3000
(noise content, about 10 MB of base64 in all, some JPEGs with a large EXIF block), then times
``pricing.meter.measure`` on several routes:

- cold: the probe cache and the rule cache emptied before each run (a conversation's first turn);
- warm: the same request again (every later turn re-sends the same images).

Goals on the 2-core reference machine: cold <= 20 ms, warm <= 5 ms for the 50 images.
"""

from __future__ import annotations

import argparse
import base64
import gc
import io
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image

from pricing.images import default_image_rule
from pricing.images import rule as image_rules
from pricing.messages import ChatRequest, parse_request
from pricing.meter import measure
from pricing.probe import CACHE, probe
from pricing.route import ImageLimits, Route

COLD_GOAL_MS = 20.0
WARM_GOAL_MS = 5.0


def noise_image(rng: random.Random, width: int, height: int, grain: int) -> Image.Image:
    """Random pixels at 1/``grain`` resolution, smoothly upscaled: noise everywhere, with a
    file size the grain controls."""
    small = (max(2, width // grain), max(2, height // grain))
    pixels = rng.randbytes(small[0] * small[1] * 3)
    return Image.frombytes("RGB", small, pixels).resize((width, height), Image.Resampling.BICUBIC)


def encode(image: Image.Image, fmt: str, rng: random.Random) -> bytes:
    buffer = io.BytesIO()
    options: dict[str, object] = {}
    if fmt == "JPEG":
        options["quality"] = 85
        if rng.random() < 0.3:  # a camera-like EXIF block pushes the frame header back
            exif = Image.Exif()
            exif[0x010E] = "x" * rng.randint(20_000, 60_000)
            options["exif"] = exif.tobytes()
        options["progressive"] = rng.random() < 0.3
    elif fmt == "WEBP":
        options["quality"] = 80
    elif fmt == "GIF":
        image = image.convert("P")
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def sized_image(
    rng: random.Random, width: int, height: int, fmt: str, target: int, ratio: list[float]
) -> bytes:
    """An image of about ``target`` bytes: coarser noise until the file fits.

    ``ratio`` carries the bytes per noise pixel seen so far, so most images encode once.
    """
    grain = max(1, int((width * height * ratio[0] / target) ** 0.5))
    for _ in range(6):
        raw = encode(noise_image(rng, width, height, grain), fmt, rng)
        noise_pixels = max(2, width // grain) * max(2, height // grain)
        ratio[0] = len(raw) / noise_pixels
        if 0.7 * target <= len(raw) <= 1.3 * target:
            break
        wanted = max(1, int((width * height * ratio[0] / target) ** 0.5))
        if wanted == grain:
            break
        grain = wanted
    return raw


def build_request(count: int, seed: int = 7, total_bytes: int = 7_500_000) -> ChatRequest:
    """``count`` images whose base64 adds up to about 4/3 x ``total_bytes``."""
    rng = random.Random(seed)
    weights = [rng.uniform(0.2, 2.5) for _ in range(count)]
    content: list[dict[str, object]] = [{"type": "text", "text": "Compare these pictures."}]
    ratio = [2.0]
    for i in range(count):
        if i % 10 == 0:
            width, height = 4000, 3000
        else:
            width, height = rng.randint(64, 4000), rng.randint(64, 3000)
        fmt = rng.choice(["JPEG", "JPEG", "JPEG", "PNG", "WEBP", "GIF"])
        if fmt != "JPEG":  # lossless-ish formats: keep them modest
            width, height = min(width, 800), min(height, 600)
        target = int(total_bytes * weights[i] / sum(weights))
        raw = sized_image(rng, width, height, fmt, target, ratio)
        url = f"data:image/{fmt.lower()};base64," + base64.b64encode(raw).decode()
        detail = rng.choice(["auto", "high", "low"])
        content.append({"type": "image_url", "image_url": {"url": url, "detail": detail}})
    body = {"model": "bench", "messages": [{"role": "user", "content": content}]}
    return parse_request(body)


def route_for(model: str) -> Route:
    return Route(
        alias=model,
        model=model,
        image_rule=default_image_rule(model, True),
        supports_vision=True,
        image_limits=ImageLimits(max_image_bytes=50 * 1024 * 1024),
    )


def clear_caches() -> None:
    CACHE.clear()
    image_rules._price.cache_clear()


def timed(
    fn: Callable[[], object], repeat: int, before: Callable[[], None] | None = None
) -> list[float]:
    out = []
    for _ in range(repeat):
        if before is not None:
            before()
        gc.collect()  # the 10 MB of strings built above must not be collected inside a run
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    started = time.perf_counter()
    request = build_request(args.images)
    urls = [p.url for p in request.messages[0].images]
    total = sum(len(u) for u in urls)
    print(
        f"built {len(urls)} images in {time.perf_counter() - started:.1f}s: "
        f"{total / 1e6:.1f} MB of base64, largest {max(map(len, urls)) / 1e6:.2f} MB"
    )
    limits = ImageLimits(max_image_bytes=50 * 1024 * 1024)
    sizes = [probe(u, limits) for u in urls]
    formats = sorted({s.format for s in sizes if s})
    print(
        f"formats {formats}, sizes up to {max(s.width for s in sizes if s)}x"
        f"{max(s.height for s in sizes if s)}"
    )
    print()

    rows = []
    probe_cold = timed(lambda: [probe(u, limits) for u in urls], args.repeat, clear_caches)
    probe_warm = timed(lambda: [probe(u, limits) for u in urls], args.repeat)
    rows.append(("probe only", probe_cold, probe_warm, None))
    for model in (
        "gpt-4o",
        "gpt-5.4",
        "claude-opus-4-7",
        "deepseek/deepseek-chat",
        "gemini-3-pro",
        "qwen2.5-vl-72b-instruct",
        "llama-4-scout",
    ):
        route = route_for(model)
        measure(request, route)  # load the tokenizer outside the timings
        cold = timed(lambda route=route: measure(request, route), args.repeat, clear_caches)
        warm = timed(lambda route=route: measure(request, route), args.repeat)
        rows.append((f"measure {model}", cold, warm, measure(request, route).images))

    print(
        f"{'':32}{'cold ms (median/min/max)':>26}{'warm ms (median/min/max)':>26}"
        f"{'image tokens':>14}"
    )
    worst_cold = worst_warm = 0.0
    for name, cold, warm, tokens in rows:
        worst_cold = max(worst_cold, statistics.median(cold))
        worst_warm = max(worst_warm, statistics.median(warm))
        print(
            f"{name:32}{statistics.median(cold):>10.2f} /{min(cold):>6.2f} /{max(cold):>6.2f}"
            f"{statistics.median(warm):>10.2f} /{min(warm):>6.2f} /{max(warm):>6.2f}"
            f"{'' if tokens is None else f'{tokens:,}':>14}"
        )
    print()
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > cores * 0.75:
        print(f"note: load average {load:.1f} on {cores} cores: other work inflates the medians;")
        print("      the minima are the better estimate of the cost itself")
    ok = worst_cold <= COLD_GOAL_MS and worst_warm <= WARM_GOAL_MS
    print(
        f"goals: cold <= {COLD_GOAL_MS} ms, warm <= {WARM_GOAL_MS} ms per {len(urls)} images: "
        f"worst medians {worst_cold:.2f} / {worst_warm:.2f} ms -> {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
