"""Real tokenizers routefit does not know, as files the simulator reads (``hf:PATH``).

bench/accuracy_heldout.py's ``real`` and ``real-heldout`` families: the other held-out families
are drawn from rules about tokenizers (per-kind rates over a base routefit ships), and rules can
be wrong about what real tokenizers do. None of these is what the route under test prices with
(its fallback meter, o200k). The set rules may be chosen on (``specs()``):

- ``deepseek`` and ``anthropic-legacy``: the Hugging Face files litellm ships;
- Mistral's Tekken (``tekken_240911.json``, a tiktoken-style BPE of 130,072 ranks, one token per
  digit) and Mistral v3's SentencePiece (``mistral_instruct_tokenizer_240323.model.v3``, 32,768
  pieces with byte fallback: a character outside its vocabulary costs one token per UTF-8 byte),
  both from the ``mistral-common`` wheel (PyPI, Apache-2.0), converted here to Hugging Face BPE
  files: Tekken's merges recovered from its ranks (each token is the last merge of the BPE of
  its own bytes by the ranks below it; counts equal tiktoken's over the same ranks), the
  SentencePiece pieces and merges as transformers' Llama converter builds them (each piece a
  merge of two pieces, ordered by the merged piece's score: equal to sentencepiece's counts on
  351 texts in eleven scripts; ordered by id, as before 2026-12-06, 339 of them, the others a
  token apart, where runs of spaces met pieces scored out of id order).

The set they are judged on (``specs(held_out=True)``): GPT-3's ``p50k_base`` (litellm's file),
Qwen's ``qwen.tiktoken`` (the ``dashscope`` wheel; converted as Tekken is, counts equal
tiktoken's) and AI21's Jurassic-2 unigram SentencePiece (the ``ai21-tokenizer`` wheel).

More held out (``specs_more()``), the kinds none of those is: the vocabularies llama.cpp keeps
to test its tokenizers (``vendor/llama.cpp/models/ggml-vocab-*.gguf`` in the
``llama-cpp-python`` sdist, PyPI, MIT; read with the ``gguf`` wheel), converted to Hugging Face
files from the GGUF's own pieces and merges. Tokens per character outside ASCII, on a sentence
of each script repeated (Chinese, Korean, Hindi, Thai, emoji; o200k: 0.71, 0.77, 0.30, 0.47,
1.75):

- Llama-2's SentencePiece (``llama-spm``, Llama-1's too): 32,000 pieces with byte fallback, a
  character with no piece costing its UTF-8 bytes (1.48, 2.00, 1.37, 1.15, 4.58);
- Falcon's byte-level BPE (65,024 tokens, English and European web text: 1.19, 2.96, 1.89,
  1.83, 2.25);
- Command-R's byte-level BPE (256,000 tokens, multilingual: 0.71, 0.73, 0.81, 1.08, 2.00);
- StarCoder2's byte-level BPE (49,152 tokens learned on code, one token per digit: 0.93, 1.15,
  1.42, 1.03, 1.92).

The converted files are written once to ``bench/results/tokenizers/`` (not committed) and
reused. Needs the packages bench/requirements.txt lists.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from pricing.byte_level import GPT2_PATTERN

OUT = Path(__file__).resolve().parent / "results" / "tokenizers"


def specs(held_out: bool | str = False) -> list[str]:
    """The simulator's tokenizer specs of real tokenizers (files made if missing): the four
    rules may be chosen on, or (``held_out``) three they are then judged on: GPT-3's
    ``p50k_base``, Qwen's (``qwen.tiktoken`` in the ``dashscope`` wheel) and AI21's Jurassic-2
    unigram SentencePiece (``j2-tokenizer.model`` in the ``ai21-tokenizer`` wheel), or
    (``held_out="more"``) the four of ``specs_more()``. Mistral's other SentencePiece models
    (v1, v7) and its earlier Tekken count text as v3 and 240911 do (the same pieces), so they
    are not a second opinion."""
    if held_out == "more":
        return specs_more()
    if held_out:
        return ["p50k_base", f"hf:{qwen()}", f"hf:{unigram()}"]
    return [
        "deepseek",
        "anthropic-legacy",
        f"hf:{tekken()}",
        f"hf:{sentencepiece('mistral_instruct_tokenizer_240323.model.v3')}",
    ]


def specs_more() -> list[str]:
    """Four more held-out tokenizers (files made if missing), of kinds the others are not:
    Llama-2's SentencePiece (byte fallback: the dearest for emoji, dear for CJK and Hangul),
    Falcon's and StarCoder2's byte-level BPEs (English web text, code) and Command-R's
    (multilingual, 256k). GPT-2's ``r50k_base`` is left out: it counts as ``p50k_base`` does
    outside runs of spaces. Each gives the ids its original gives (see ``llama_cpp()``)."""
    return [f"hf:{llama_cpp(name)}" for name in LLAMA_CPP_NAMES]


def _data(name: str) -> Path:
    import mistral_common

    return Path(mistral_common.__file__).resolve().parent / "data" / name


def _byte_chars() -> dict[int, str]:
    """GPT-2's printable stand-in for every byte (the byte-level BPE's alphabet)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def _split(token: bytes, ranks: dict[bytes, int]) -> list[bytes]:
    """BPE of ``token``'s bytes by the ranks below its own: the two parts of its last merge."""
    limit = ranks[token]
    parts = [bytes([b]) for b in token]
    while True:
        best: tuple[int, int] | None = None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < limit and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            return parts
        i = best[1]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]


def tekken() -> Path:
    path = OUT / "tekken_240911.json"
    if not path.is_file():
        spec = json.loads(_data("tekken_240911.json").read_text())
        config = spec["config"]
        size = config["default_vocab_size"] - config["default_num_special_tokens"]
        ranks = {base64.b64decode(v["token_bytes"]): v["rank"] for v in spec["vocab"][:size]}
        _write_byte_level(path, ranks, config["pattern"])
    return path


#: Qwen's pre-tokenizer (dashscope/tokenizers/qwen_tokenizer.py): cl100k's, one digit a piece.
_QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def qwen() -> Path:
    path = OUT / "qwen.json"
    if not path.is_file():
        import dashscope

        file = Path(dashscope.__file__).resolve().parent / "resources" / "qwen.tiktoken"
        ranks = {}
        for line in file.read_bytes().splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        _write_byte_level(path, ranks, _QWEN_PATTERN)
    return path


def _write_byte_level(path: Path, ranks: dict[bytes, int], pattern: str) -> None:
    """A tiktoken-style BPE (ranks and a pre-tokenizer pattern) as a Hugging Face file."""
    chars = _byte_chars()

    def text(token: bytes) -> str:
        return "".join(chars[b] for b in token)

    merges = []
    for token, _ in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) > 1:
            left, right = _split(token, ranks)  # every rank is a merge of two
            merges.append(f"{text(left)} {text(right)}")
    vocab = {text(t): r for t, r in ranks.items()}
    _write_bpe(path, vocab, merges, [pattern], ignore_merges=True)


def _write_bpe(
    path: Path, vocab: dict[str, int], merges: list[str], patterns: list[str], ignore_merges: bool
) -> None:
    """A byte-level BPE as a Hugging Face file: the text split by each pattern in turn (every
    match and every gap between matches a piece, as llama.cpp's and Hugging Face's pre-tokenizers
    do), then GPT-2's bytes-as-characters. ``ignore_merges``: a piece that is a token is one
    token (tiktoken's rule; Hugging Face's BPEs merge it from its bytes like any other)."""
    splits = [
        {"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}
        for p in patterns
    ]
    hf = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "post_processor": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                *splits,
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": True,
                    "use_regex": False,
                },
            ],
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": ignore_merges,
            "vocab": vocab,
            "merges": merges,
        },
    }
    OUT.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(hf, ensure_ascii=False))


def sentencepiece(name: str) -> Path:
    path = OUT / f"{name}.json"
    if path.is_file():
        return path
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(_data(name)))
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    special = {i for i in vocab.values() if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i)}
    scores = [sp.get_score(i) for i in range(sp.get_piece_size())]
    _write_spm_bpe(path, vocab, special, scores)
    return path


def _write_spm_bpe(
    path: Path, vocab: dict[str, int], special: set[int], scores: list[float] | None = None
) -> None:
    """A BPE SentencePiece (pieces by id; ``special``: the control, unknown and byte pieces) as
    a Hugging Face file: its pieces, and its merges as transformers' Llama converter builds them
    (each piece a merge of two pieces, ordered by the merged piece's score, highest first, or
    without ``scores`` by its id); a space prefixed, spaces as ``▁``, a character with no piece
    as its UTF-8 bytes. The scores matter where one falls out of id order: Llama's ``▁▁`` (id
    259) scores -1e9, so SentencePiece merges two spaces last (``▁ ▁Hello``, not ``▁▁ Hello``)."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    merges = []
    for piece, pid in vocab.items():
        if pid in special:
            continue
        rank = -scores[pid] if scores is not None else 0.0
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                merges.append((rank, pid, vocab[left], vocab[right], left, right))
    merges.sort()
    bpe = models.BPE(
        vocab=vocab,
        merges=[(left, right) for *_, left, right in merges],
        unk_token="<unk>",
        fuse_unk=True,
        byte_fallback=True,
    )
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    OUT.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))


def unigram() -> Path:
    """AI21's Jurassic-2 tokenizer: a unigram model of 262,144 pieces with byte fallback, NFKC,
    no word boundaries (a piece may span words), as a Hugging Face ``Unigram`` of the same
    pieces and scores (counts equal sentencepiece's on 285 of 300 texts, within a token on all)."""
    path = OUT / "j2-tokenizer.json"
    if path.is_file():
        return path
    import ai21_tokenizer
    import sentencepiece
    from tokenizers import Tokenizer, models, normalizers

    file = Path(ai21_tokenizer.__file__).resolve().parent / "resources" / "j2-tokenizer"
    sp = sentencepiece.SentencePieceProcessor(model_file=str(file / "j2-tokenizer.model"))
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    tok = Tokenizer(models.Unigram(pieces, unk_id=sp.unk_id(), byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(" ", "▁")])
    OUT.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


#: The llama-cpp-python sdist whose llama.cpp holds the vocabularies (pinned: the same files).
_LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
#: The vocabularies of it ``specs_more()`` converts (``ggml-vocab-{name}.gguf``).
LLAMA_CPP_NAMES = ("llama-spm", "falcon", "command-r", "starcoder")

#: llama.cpp's pre-tokenizers (src/llama-vocab.cpp, by ``tokenizer.ggml.pre``), each pattern
#: splitting the pieces of the one before: Falcon's splits punctuation runs and then numbers
#: three digits at a time; StarCoder's and Command-R's, one digit a piece; then GPT-2's.
_LLAMA_CPP_PATTERNS = {
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2_PATTERN, r"[0-9][0-9][0-9]"],
    "starcoder": [r"\p{N}", GPT2_PATTERN],
    "command-r": [r"\p{N}", GPT2_PATTERN],
}


def _gguf(name: str) -> Path:
    """llama.cpp's ``ggml-vocab-{name}.gguf`` (a model's tokenizer, no weights), from the
    llama-cpp-python sdist on PyPI: downloaded with pip (76 MB; a source archive, nothing is
    built) the first time, and the vocabularies of ``LLAMA_CPP_NAMES`` and their test files
    (``.inp``/``.out``) kept beside the converted files."""
    src = OUT / "llama.cpp"
    path = src / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        with tempfile.TemporaryDirectory() as tmp:
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
            subprocess.run([*pip, _LLAMA_CPP_PYTHON, "-d", tmp], check=True)
            sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
            src.mkdir(parents=True, exist_ok=True)
            with tarfile.open(sdist) as tar:
                for member in tar.getmembers():
                    file = Path(member.name)
                    vocab = file.name.removeprefix("ggml-vocab-").split(".gguf")[0]
                    if file.parent.name == "models" and vocab in LLAMA_CPP_NAMES:
                        data = tar.extractfile(member)
                        if data is not None:
                            (src / file.name).write_bytes(data.read())
    return path


def llama_cpp(name: str) -> Path:
    """One of llama.cpp's vocabularies (``llama-spm``, ``falcon``, ``command-r``,
    ``starcoder``) as a Hugging Face file: a SentencePiece (``tokenizer.ggml.model`` ``llama``)
    by the conversion ``sentencepiece()`` uses, a byte-level BPE (``gpt2``) by its own merges
    and llama.cpp's pre-tokenizer for it. Control and user-defined tokens (``<s>``, chat
    markers) are not matched in text: a user who types them gets the characters.

    The ids equal the original's on each of the 47 texts of llama.cpp's tests (``check()``:
    ids the original Hugging Face tokenizer gave) and llama.cpp's (llama-cpp-python built from
    the same sdist) on each of 351 texts of 12 kinds (prose, code, JSON, Chinese, Japanese,
    Korean, Russian, Arabic, Hindi, Thai, emoji, mixed); Llama's also equal sentencepiece's (a
    model rebuilt from the GGUF's pieces, scores and types) on the 351. Not matched: Command-R's
    original normalizes text to NFC, llama.cpp does not, nor does this file (decomposed accents
    are rare in prompts)."""
    path = OUT / f"{name}.json"
    if path.is_file():
        return path
    from gguf import GGUFReader

    fields = GGUFReader(_gguf(name)).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    vocab = {token: i for i, token in enumerate(tokens)}
    if fields["tokenizer.ggml.model"].contents() == "llama":
        types = fields["tokenizer.ggml.token_type"].contents()
        special = {i for i, t in enumerate(types) if t != 1}  # 1: a normal piece
        _write_spm_bpe(path, vocab, special, list(fields["tokenizer.ggml.scores"].contents()))
    else:
        merges = fields["tokenizer.ggml.merges"].contents()
        _write_bpe(path, vocab, merges, _LLAMA_CPP_PATTERNS[name], ignore_merges=False)
    return path


def check(name: str) -> tuple[int, int]:
    """How many of llama.cpp's test texts for ``name`` the converted file gives the original's
    ids for, and how many there are (``ggml-vocab-{name}.gguf.inp``: the texts, separated by
    ``__ggml_vocab_test__`` lines; ``.out``: the ids, one line a text)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(llama_cpp(name)))
    tests = OUT / "llama.cpp" / f"ggml-vocab-{name}.gguf"
    texts = tests.with_suffix(".gguf.inp").read_bytes().decode().split("\n__ggml_vocab_test__\n")
    ids = tests.with_suffix(".gguf.out").read_bytes().decode().split("\n")
    equal = 0
    for text, line in zip(texts, ids, strict=False):
        got = tok.encode(text, add_special_tokens=False).ids if text else []
        equal += got == [int(i) for i in line.split()]
    return equal, len(texts)


if __name__ == "__main__":
    print("\n".join([*specs(), *specs(held_out=True), *specs_more()]))
    for name in LLAMA_CPP_NAMES:
        equal, total = check(name)
        print(f"{name}: the original's ids on {equal} of llama.cpp's {total} test texts")
