"""Offline tokenizers: loading without the network, counting, boundaries, the count cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pricing.tokenizers import (
    CountCache,
    TokenizerError,
    count_cache_lookups,
    default_tokenizer,
    get_tokenizer,
    litellm_tokenizer_dir,
    memoised,
    parse_tokenizer_spec,
    remember,
    warm_up,
)

NAMED = ["o200k_base", "cl100k_base", "deepseek", "anthropic-legacy"]


def test_tokenizers_load_with_the_network_blocked(tmp_path):
    """A fresh interpreter with every socket refused still loads and counts with each tokenizer.

    TIKTOKEN_CACHE_DIR points at an empty directory, so only routefit's use of litellm's shipped
    files can make this pass.
    """
    script = textwrap.dedent(
        """
        import socket
        def refuse(*a, **k):
            raise RuntimeError("network access attempted")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from pricing.tokenizers import get_tokenizer
        for name in ("o200k_base", "cl100k_base", "deepseek", "anthropic-legacy"):
            assert get_tokenizer(name).count("hello world") > 0, name
        print("ok")
        """
    )
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=str(tmp_path), TMPDIR=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert list(tmp_path.iterdir()) == []  # nothing was downloaded into the cache either


def test_known_counts():
    # "hello world" is two tokens in every OpenAI encoding; tiktoken's own test vector.
    assert get_tokenizer("o200k_base").count("hello world") == 2
    assert get_tokenizer("cl100k_base").count("hello world") == 2
    assert get_tokenizer("o200k_base").count("") == 0


def test_hf_path_spec_loads_a_user_tokenizer_file():
    path = litellm_tokenizer_dir() / "deepseek_tokenizer.json"
    by_path = get_tokenizer(f"hf:{path}")
    assert by_path.count("Hello, DeepSeek!") == get_tokenizer("deepseek").count("Hello, DeepSeek!")


@pytest.mark.parametrize(
    "spec", ["o300k", "", "hf:", "heuristic:x", "heuristic:0", "heuristic:100"]
)
def test_bad_specs_are_rejected(spec):
    with pytest.raises(TokenizerError):
        parse_tokenizer_spec(spec)


def test_missing_hf_file_is_a_clear_error(tmp_path):
    with pytest.raises(TokenizerError, match="does not exist"):
        get_tokenizer(f"hf:{tmp_path / 'nope.json'}")


def test_warm_up_leaves_no_thread_behind_and_fails_on_the_callers(tmp_path):
    # the start-up's and a reload's load: the tokenizer every view shares; the thread that made
    # its first encode does not outlive the call (bench/count_threads.py says why it must not
    # count again)
    assert warm_up("cl100k_base") is get_tokenizer("cl100k_base")
    assert not [t for t in threading.enumerate() if t.name.startswith("routefit-warm-up")]
    with pytest.raises(TokenizerError, match="does not exist"):
        warm_up(f"hf:{tmp_path / 'nope.json'}")
    with pytest.raises(TokenizerError):
        warm_up("o300k")


def test_heuristic_counts_characters():
    tok = get_tokenizer("heuristic:4")
    assert tok.count("a" * 8) == 2
    assert tok.count("a" * 9) == 3


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o", "o200k_base"),
        ("openai/gpt-4.1-mini", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-5.4", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("deepseek/deepseek-chat", "deepseek"),
        ("anthropic/claude-sonnet-4-5", "anthropic-legacy"),
        ("gemini/gemini-2.5-pro", "o200k_base"),
    ],
)
def test_default_tokenizer_by_model(model, expected):
    assert default_tokenizer(model) == expected


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=400)


@settings(max_examples=60, deadline=None)
@given(text=texts, name=st.sampled_from([*NAMED, "heuristic:3.5"]))
def test_boundaries_cover_the_text_in_order(text, name):
    tok = get_tokenizer(name)
    starts = tok.boundaries(text)
    assert starts == sorted(starts)
    assert starts[0] == 0
    assert all(0 <= s <= len(text) for s in starts)
    if not name.startswith("heuristic"):
        assert len(starts) == tok.count(text)


def test_count_cache_is_bounded_and_least_recently_used_goes_first():
    cache = CountCache(maxsize=2)
    calls: list[str] = []

    def compute(text: str) -> int:
        calls.append(text)
        return len(text)

    a, b, c = "a" * 100, "b" * 100, "c" * 100
    cache.get_or_compute(a, compute)
    cache.get_or_compute(b, compute)
    cache.get_or_compute(a, compute)  # a is now the most recently used
    cache.get_or_compute(c, compute)  # evicts b
    cache.get_or_compute(a, compute)
    cache.get_or_compute(b, compute)
    assert calls == [a, b, c, b]
    assert len(cache) == 2


def test_a_conversation_is_tokenized_once():
    tok = get_tokenizer("o200k_base")
    text = "a unique message body for the cache test " * 50
    misses = tok.cache.misses  # type: ignore[attr-defined]
    for _ in range(5):
        tok.count(text)
    assert tok.cache.misses == misses + 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_encodings_agree_with_tiktokens_own_definition(name, monkeypatch):
    """routefit builds each encoding itself (no environment change while loading); tiktoken's own
    constructor, pointed at the same offline files, must define exactly the same encoding."""
    import tiktoken_ext.openai_public as public

    from pricing.tokenizers import _TIKTOKEN_SPECS, _read_ranks, tiktoken_file

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(litellm_tokenizer_dir()))
    theirs = public.ENCODING_CONSTRUCTORS[name]()
    sha256, pattern, special = _TIKTOKEN_SPECS[name]
    assert pattern == theirs["pat_str"]
    assert special == theirs["special_tokens"]
    assert _read_ranks(tiktoken_file(name), sha256) == theirs["mergeable_ranks"]


def test_loading_leaves_the_environment_alone(tmp_path):
    """Loading in a fresh interpreter changes no environment variable at any point: the
    environment is frozen by replacing os.environ's setter before the import."""
    script = textwrap.dedent(
        """
        import os
        def refuse(*a, **k):
            raise RuntimeError("environment changed while loading")
        type(os.environ).__setitem__ = refuse
        type(os.environ).__delitem__ = refuse
        os.putenv = refuse
        os.unsetenv = refuse
        from pricing.tokenizers import get_tokenizer
        for name in ("o200k_base", "cl100k_base"):
            assert get_tokenizer(name).count("hello world") == 2, name
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_damaged_rank_file_is_refused(tmp_path):
    from pricing.tokenizers import _load_tiktoken, tiktoken_file

    damaged = tiktoken_file("cl100k_base", tmp_path)
    damaged.write_bytes(tiktoken_file("cl100k_base").read_bytes()[:-10])
    with pytest.raises(TokenizerError, match="does not match its published hash"):
        _load_tiktoken("cl100k_base", tmp_path)


# --------------------------------------------------------------------------------------------
# Scopes: a count is reused only for the tenant that sent the text (docs/security.md,
# "Isolation of prompt-derived facts")

SCOPES = st.binary(max_size=12)
#: Short texts are their own key, long ones (64+ characters) a digest: both kinds.
TEXTS = st.one_of(st.text(max_size=63), st.text(min_size=64, max_size=300))


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(TEXTS, min_size=1, max_size=8, unique=True), a=SCOPES, b=SCOPES)
def test_a_scope_never_finds_what_another_scope_put(texts, a, b):
    """Whatever the texts (short ones are their own key, long ones a digest), an entry put in
    one scope is found in that scope and in no other; counting in one scope never makes a
    lookup in another one a hit."""
    cache = CountCache()
    computed: list[tuple[bytes, str]] = []

    def compute_in(scope: bytes):
        def compute(text: str) -> int:
            computed.append((scope, text))
            return len(text)

        return compute

    for text in texts:
        assert cache.get_or_compute(text, compute_in(a), a) == len(text)
    hits = cache.hits
    for text in texts:
        assert cache.peek(text, a) == len(text)
        assert cache.get_or_compute(text, compute_in(a), a) == len(text)
    assert (a, texts[0]) in computed
    computed.clear()
    if a == b:
        assert cache.missing(texts, b) == []
        return
    assert cache.hits == hits + 2 * sum(len(t) >= 64 for t in texts)  # a's own repeats hit
    hits = cache.hits
    for text in texts:
        assert cache.peek(text, b) is None
    assert sorted(cache.missing(texts, b)) == sorted({t for t in texts if len(t) >= 64})
    for text in texts:
        cache.get_or_compute(text, compute_in(b), b)
    assert {t for _, t in computed} == set(texts)  # every text counted afresh for b
    assert cache.hits == hits


def test_one_bound_serves_every_scope():
    """The memory bound is the cache's, not one per tenant: a thousand tenants sharing a
    cache of four entries hold four entries."""
    cache = CountCache(maxsize=4)
    text = "the same long text every tenant sends, long enough to be digest-keyed" * 2
    for tenant in range(1000):
        cache.put(text, 7, f"team-{tenant}".encode())
    assert len(cache._data) == 4
    assert cache.peek(text, b"team-999") == 7
    assert cache.peek(text, b"team-0") is None  # evicted long ago, least recently used


def test_scoped_tokenizers_share_the_encoder_and_cache_but_not_entries():
    base = get_tokenizer("o200k_base")
    team_a = get_tokenizer("o200k_base", b"team-a")
    team_b = get_tokenizer("o200k_base", b"team-b")
    assert get_tokenizer("o200k_base", b"") is base
    assert team_a is get_tokenizer("o200k_base", b"team-a")  # views are kept, not rebuilt
    assert team_a.cache is base.cache is team_b.cache  # type: ignore[attr-defined]
    text = f"{uuid.uuid4()} " + "a text only team A sent, counted once for it " * 40
    misses = base.cache.misses  # type: ignore[attr-defined]
    n = team_a.count(text)
    assert team_a.count(text) == n
    assert base.cache.misses == misses + 1  # type: ignore[attr-defined]
    assert memoised(team_a, text) == n
    assert memoised(team_b, text) is None
    assert memoised(base, text) is None  # the open tenant is a scope of its own
    assert team_b.count(text) == n  # the same count, counted again for team B
    assert base.cache.misses == misses + 2  # type: ignore[attr-defined]
    other = text + " and a sequel"
    remember(team_b, other, 1234)
    assert memoised(team_b, other) == 1234
    assert memoised(team_a, other) is None


def test_count_cache_lookups_add_up_every_loaded_tokenizer():
    text = f"{uuid.uuid4()} " + "counted on two tokenizers, then again on both " * 10
    hits, misses = count_cache_lookups()
    for name in ("o200k_base", "cl100k_base"):
        get_tokenizer(name, b"t").count(text)
        get_tokenizer(name, b"t").count(text)
    assert count_cache_lookups() == (hits + 2, misses + 2)
