"""A long text counted a chunk at a time (``pricing.chunks``, ``pricing.tokenizers``): the count
is the whole's for every tokenizer routefit ships, the chunks are cut by the content so the same
stretch is cut alike wherever it sits, and a text that is mostly one counted before recounts only
the chunks around what changed."""

from __future__ import annotations

import itertools
import json
import random
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_split_count import FRAGMENTS, SHIPPED, _encode

from pricing import chunks as chunking
from pricing import tokenizers
from pricing.bounds import Proof, byte_level_bound
from pricing.chunks import AVERAGE, content_chunks
from pricing.route import Route
from pricing.tokenizers import _HuggingFace, get_tokenizer, memoised, shared_out

LETTERS = "abcdefghijklmnopqrstuvwxyz"
ROOT = Path(__file__).resolve().parents[2]


def prose(words: int, seed: int) -> str:
    """Words of random letters (no word list a rule could be fitted to), sentences, lines."""
    rnd = random.Random(seed)
    out = []
    for i in range(words):
        word = "".join(rnd.choices(LETTERS, k=rnd.randint(1, 11)))
        out.append(word + (".\n" if i % 97 == 96 else ", " if i % 13 == 12 else " "))
    return "".join(out)


def shared(a: list[str], b: list[str]) -> int:
    """How many of ``b``'s chunks are among ``a``'s."""
    seen = set(a)
    return sum(chunk in seen for chunk in b)


pieces = st.lists(st.sampled_from([*FRAGMENTS, "word", "Tome", "ship", "Lamp"]), max_size=400)


@settings(max_examples=300, deadline=None)
@given(text=pieces.map("".join))
def test_chunks_join_back_and_are_cut_only_where_counts_add_up(text):
    """Every cut is a point of ``split_for_count``'s rule: a space after printable ASCII."""
    chunks = content_chunks(text, 256)
    assert "".join(chunks) == text
    assert all(chunks) or chunks == [""]
    for before, chunk in itertools.pairwise(chunks):
        assert chunk[0] == " " and "!" <= before[-1] <= "~"


@pytest.mark.parametrize("spec", SHIPPED)
@settings(max_examples=100, deadline=None)
@given(text=pieces.map("".join))
def test_the_chunks_counts_add_up_to_the_whole(spec, text):
    chunks = content_chunks(text, 256)
    assert sum(_encode(spec, chunk) for chunk in chunks) == _encode(spec, text)


@pytest.mark.parametrize("spec", SHIPPED)
def test_a_long_text_is_counted_exactly_a_chunk_at_a_time(spec):
    """Through the tokenizer's own count, first cold (every chunk counted) then with a new head
    (the chunks after it found), both equal to counting the whole at once."""
    rnd = random.Random(spec)
    body = "".join(rnd.choice(FRAGMENTS) + rnd.choice([" ", " ", "\n"]) for _ in range(5_000))
    body += prose(20_000, 3)
    tok = get_tokenizer(spec, uuid.uuid4().bytes)
    assert len(content_chunks(body)) > 4
    for head in ("Request 1:\n", "Request 22 of a longer run:\n"):
        assert tok.count(head + body) == _encode(spec, head + body)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_same_text_is_cut_alike_wherever_it_sits(seed):
    """A new head, a change in the middle, a new tail: every chunk but those next to the
    change is one the text had before (the cuts are the content's, not the offsets')."""
    body = prose(12_000, seed)
    before = content_chunks(body, 2048)  # smaller chunks than by default: more to keep
    assert len(before) > 12
    middle = len(body) // 2
    for changed in (
        "Request 2:\n" + body,
        "x" * 700 + " " + body,
        body[:middle] + " a few words put in here, " + body[middle:],
        body[:middle] + body[middle + 300 :],
        body + " and a new line at the end.\n",
    ):
        after = content_chunks(changed, 2048)
        assert shared(before, after) >= len(after) - 3, changed[:40]


def test_a_text_mostly_seen_before_recounts_only_what_changed():
    tok = get_tokenizer("o200k_base", uuid.uuid4().bytes)
    body = prose(30_000, 7)
    n_chunks = len(content_chunks(body))
    tok.count("Request 1:\n" + body)
    hits, misses = tok.cache.hits, tok.cache.misses  # type: ignore[attr-defined]
    assert tok.count("Request 2:\n" + body) == _encode("o200k_base", "Request 2:\n" + body)
    # the new text is a miss, and so are the chunks around its new head; the rest are found
    assert tok.cache.misses - misses <= 1 + 3  # type: ignore[attr-defined]
    assert tok.cache.hits - hits >= n_chunks - 3  # type: ignore[attr-defined]


class _Recording:
    """A Hugging Face tokenizer that notes which thread encodes each text. With ``meet``, each
    thread's first text waits for the other threads there: work handed to a pool of that many
    is then seen on all of them, whatever the scheduler (one thread done before the next wakes
    could otherwise take every part)."""

    def __init__(self, inner: Any, meet: threading.Barrier | None = None) -> None:
        self.inner = inner
        self.meet = meet
        self.seen: list[tuple[str, int]] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> Any:
        me = threading.get_ident()
        first = all(thread != me for _, thread in self.seen)
        self.seen.append((text, me))
        if first and self.meet is not None:
            self.meet.wait(timeout=30)  # broken, it raises: the parts were not side by side
        return self.inner.encode(text, add_special_tokens=add_special_tokens)


def _words_tokenizer() -> Any:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers

    tok = HFTokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def test_new_chunks_are_counted_once_each_on_both_counting_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call per thread, not per chunk, on the counting pool's threads, never the caller's
    (``tokenizers.enrol``); a chunk that repeats within the text is counted once."""
    monkeypatch.setattr(tokenizers, "_THREADS", 2)
    recording = _Recording(_words_tokenizer(), threading.Barrier(2))
    tok = _HuggingFace("words", recording, splittable=True)
    body = prose(9_000, 11)
    text = body + body  # every chunk of the second half is one of the first's
    chunks = content_chunks(text)
    assert tok.count(text) == len(text.split())
    counted = [t for t, _ in recording.seen]
    assert sorted(counted) == sorted(set(chunks))
    threads = {thread for _, thread in recording.seen}
    assert len(threads) == 2 and threading.get_ident() not in threads


def test_shared_out_keeps_the_order_of_the_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokenizers, "_THREADS", 2)
    pieces = [f"{i} " * (i * 40) for i in range(1, 60)]
    assert shared_out(pieces, lambda p: len(p.split())) == [i * 40 for i in range(1, 60)]


def test_a_text_without_a_chunk_cut_is_one_chunk():
    assert content_chunks("中文字 " * 5_000) == ["中文字 " * 5_000]  # no space after ASCII
    assert content_chunks("") == [""]
    assert len(content_chunks(prose(40_000, 5))) > 10


def test_without_the_compiled_chunker_every_text_is_one_chunk(monkeypatch: pytest.MonkeyPatch):
    """The pure-Python FastCDC would cost more than the count it saves: not used."""
    monkeypatch.setattr(chunking, "_compiled", lambda: None)
    text = prose(8_000, 5)
    assert content_chunks(text, 2048) == [text]
    tok = get_tokenizer("o200k_base", uuid.uuid4().bytes)
    assert tok.count(text) == _encode("o200k_base", text)


def test_a_chunk_is_a_few_kilobytes_of_any_text_with_spaces():
    """Prose, code, JSON: the chunker reads bytes, not words (a rule over words would leave
    some texts in one chunk)."""
    code = "".join(path.read_text() for path in sorted((ROOT / "pricing").glob("*.py")))
    data = json.dumps([{"id": i, "name": f"item {i}", "text": prose(30, i)} for i in range(3000)])
    for text in (prose(40_000, 9), code, data):
        assert len(text) > 8 * AVERAGE
        sizes = [len(chunk) for chunk in content_chunks(text)]
        assert len(sizes) > len(text) // (4 * AVERAGE)


def test_a_proof_bounds_the_chunks_it_has_seen_at_their_counts():
    """A long text behind a new head, over the budget at its byte-level bound: tightened, the
    memoised chunks enter at their counts and only the few new ones at their bound — proved
    without counting anything, never below the count."""
    route = Route("gpt", "gpt-4o", tokenizer="o200k_base", scope=uuid.uuid4().bytes)
    tok = get_tokenizer("o200k_base", route.scope)
    body = prose(30_000, 13)
    tok.count("Request 1:\n" + body)
    text = "Request 2, a longer head than the first:\n" + body
    exact = _encode("o200k_base", text)
    new = [c for c in content_chunks(text) if c not in content_chunks("Request 1:\n" + body)]
    assert sum(map(len, new)) < len(text) // 4
    budget = exact + sum(map(byte_level_bound, new))
    proof = Proof(route)
    assert proof(text) == byte_level_bound(text) > budget
    misses = tok.cache.misses  # type: ignore[attr-defined]
    assert proof.tighten([text], proof(text) - budget)
    assert exact <= proof(text) <= budget
    assert tok.cache.misses == misses  # type: ignore[attr-defined]  # nothing counted
    other = Proof(replace(route, scope=uuid.uuid4().bytes))  # another team: no chunks of its own
    assert other.tighten([text], other(text) - budget)
    assert tok.cache.misses > misses  # type: ignore[attr-defined]  # it had to count
    assert other(text) <= budget


def test_what_a_proof_counts_is_memoised_chunk_by_chunk():
    """A proof that counted a new text (tightened, then completed) leaves its chunks' counts
    for the team's next text that shares them, and the whole count for the exact fit."""
    route = Route("gpt", "gpt-4o", tokenizer="o200k_base", scope=uuid.uuid4().bytes)
    body = prose(30_000, 17)
    first = "Request 1:\n" + body
    proof = Proof(route)
    assert proof(first) == byte_level_bound(first)  # nothing seen: the byte-level bound
    assert proof.tighten([first], proof(first) // 4)
    proof.complete()
    assert proof(first) == _encode("o200k_base", first)
    assert memoised(get_tokenizer("o200k_base", route.scope), first) == proof(first)
    second = "Request 2:\n" + body
    new = [c for c in content_chunks(second) if c not in content_chunks(first)]
    exact = _encode("o200k_base", second)
    proof = Proof(route)
    assert proof.tighten([second], proof(second) - exact - sum(map(byte_level_bound, new)))
    assert exact <= proof(second) <= exact + sum(map(byte_level_bound, new))
    assert sum(map(len, new)) < len(second) // 4
