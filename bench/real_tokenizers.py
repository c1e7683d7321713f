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
  merge of two pieces, ordered by the merged piece's id; counts within a token of
  sentencepiece's on 500 texts, equal on 494).

The set they are judged on (``specs(held_out=True)``): GPT-3's ``p50k_base`` (litellm's file),
Qwen's ``qwen.tiktoken`` (the ``dashscope`` wheel; converted as Tekken is, counts equal
tiktoken's) and AI21's Jurassic-2 unigram SentencePiece (the ``ai21-tokenizer`` wheel).

The converted files are written once to ``bench/results/tokenizers/`` (not committed) and
reused. Needs the packages bench/requirements.txt lists.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "tokenizers"


def specs(held_out: bool = False) -> list[str]:
    """The simulator's tokenizer specs of real tokenizers (files made if missing): the four
    rules may be chosen on, or (``held_out``) three they are then judged on: GPT-3's
    ``p50k_base``, Qwen's (``qwen.tiktoken`` in the ``dashscope`` wheel) and AI21's Jurassic-2
    unigram SentencePiece (``j2-tokenizer.model`` in the ``ai21-tokenizer`` wheel). Mistral's
    other SentencePiece models (v1, v7) and its earlier Tekken count text as v3 and 240911 do
    (the same pieces), so they are not a second opinion."""
    if held_out:
        return ["p50k_base", f"hf:{qwen()}", f"hf:{unigram()}"]
    return [
        "deepseek",
        "anthropic-legacy",
        f"hf:{tekken()}",
        f"hf:{sentencepiece('mistral_instruct_tokenizer_240323.model.v3')}",
    ]


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
                {
                    "type": "Split",
                    "pattern": {"Regex": pattern},
                    "behavior": "Isolated",
                    "invert": False,
                },
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
            "ignore_merges": True,
            "vocab": {text(t): r for t, r in ranks.items()},
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
    from tokenizers import Tokenizer, decoders, models, normalizers

    sp = sentencepiece.SentencePieceProcessor(model_file=str(_data(name)))
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for piece, pid in vocab.items():
        if sp.is_control(pid) or sp.is_unknown(pid) or sp.is_byte(pid):
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                merges.append((pid, vocab[left], vocab[right], left, right))
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
    return path


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


if __name__ == "__main__":
    print("\n".join([*specs(), *specs(held_out=True)]))
