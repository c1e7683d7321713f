"""Which thread owns a tiktoken encoding's regex cache, and what it costs the others.

    python bench/count_threads.py              # o200k and cl100k, 3 rounds, ~1 minute
    python bench/count_threads.py --rounds 5 --encodings o200k_base

The regex crate keeps one cache per compiled regex for the first thread that uses it (its
owner) and hands every other thread one from a shared stack. What that does to counting, each
figure from a fresh process (the owner is fixed for a process's life), counting ~100k tokens
of prose (words and some numbers) with the buffer count routefit uses
(``pricing.byte_level.counter``):

- ``alone, owner`` / ``alone, not owner``: one thread counts the whole text;
- ``two threads, no owner among them``: the text in two halves on two threads at once, the
  first encode made on a thread that ended (``pricing.tokenizers.warm_up``: routefit today);
- ``two threads, one the owner``: the same, one of the two threads made the first encode.

Wall p50 and CPU per count over 21 counts; rounds interleave the modes. bench/REPORT.md 1j.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODES = {
    "alone, owner": "alone-owner",
    "alone, not owner": "alone-other",
    "two threads, no owner among them": "two-none",
    "two threads, one the owner": "two-owner",
}
_WORDS = (
    "the of and to in is that for it as with was on be by this are or at from but not have an "
    "they which one you were all we her she there would their will each about how up out them "
    "then many some so these other into has more time people year way day thing man world life"
).split()


def _text(tokens: int) -> str:
    rng = random.Random(1)
    return " ".join(
        rng.choice(_WORDS) + (str(rng.randint(0, 999)) if rng.random() < 0.05 else "")
        for _ in range(tokens)
    )


def _child(encoding: str, mode: str, tokens: int) -> None:
    """One process, one mode: prints 'wall_ms cpu_ms'."""
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    sys.path.insert(0, str(HERE.parent))
    from pricing.byte_level import counter
    from pricing.tokenizers import _load_tiktoken, split_for_count

    enc = _load_tiktoken(encoding)
    made: list = []

    def first_encode() -> None:  # ``counter`` checks itself on a probe text: an encode
        made.append(counter.__wrapped__(enc))

    if mode in ("alone-owner", "two-owner"):
        first_encode()  # this thread owns the cache
    else:
        gone = threading.Thread(target=first_encode)
        gone.start()
        gone.join()
    count = made[0]
    other = ThreadPoolExecutor(1)
    other.submit(len, "").result()  # the pool's thread exists before timing
    text = _text(tokens)
    half, rest = split_for_count(text, 2)

    def once() -> float:
        started = time.perf_counter()
        if mode.startswith("alone"):
            count(text)
        else:
            away = other.submit(count, rest)
            count(half)
            away.result()
        return (time.perf_counter() - started) * 1000

    for _ in range(3):
        once()
    cpu = time.process_time()
    walls = [once() for _ in range(21)]
    print(f"{statistics.median(walls):.3f} {(time.process_time() - cpu) / 21 * 1000:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=100_000, help="words of text (~tokens)")
    parser.add_argument("--encodings", default="o200k_base,cl100k_base")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], args.tokens)
        return
    for encoding in args.encodings.split(","):
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in MODES}
        for _ in range(args.rounds):
            for name, mode in MODES.items():
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--tokens",
                        str(args.tokens),
                        "--child",
                        encoding,
                        mode,
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()
                figures[name].append((float(out[0]), float(out[1])))
        base = statistics.median(w for w, _ in figures["two threads, no owner among them"])
        print(f"\n{encoding}, {args.tokens:,} words, medians of {args.rounds} processes")
        print("| mode | wall p50 ms | CPU ms per count | wall ÷ routefit's |")
        print("|---|---:|---:|---:|")
        for name, rows in figures.items():
            wall = statistics.median(w for w, _ in rows)
            cpu = statistics.median(c for _, c in rows)
            print(f"| {name} | {wall:.2f} | {cpu:.2f} | {wall / base:.2f} |")


if __name__ == "__main__":
    main()
