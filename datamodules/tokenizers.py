"""Subword tokenizers (BPE, unigram) built on Hugging Face `tokenizers`, and one factory for every kind; their JSON
form fits in a checkpoint, so a model carries the exact tokenizer it was trained with (docs/guide/data.md,
"Tokenizers")."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Literal

from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from .sentencepiece import SentencePieceVocab
from .vocab import BOS, EOS, PAD, SPECIAL_TOKENS, UNK, Tokenizer, Vocab, content_ids

TokenizerKind = Literal["bpe", "unigram", "char", "word"]


class SubwordTokenizer:
    """A trained Hugging Face tokenizer behind the project's `Tokenizer` protocol: NFKC-normalised, spaces kept as `▁`
    inside the pieces, so `decode` restores the original spacing and casing with no detokenizer."""

    kind = "subword"
    pad_id, bos_id, eos_id, unk_id = PAD, BOS, EOS, UNK

    def __init__(self, tokenizer: HFTokenizer):
        for i, tok in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(tok) != i:
                raise ValueError(f"Subword tokenizer must map {tok!r} to id {i}, found {tokenizer.token_to_id(tok)}")
        self.tokenizer = tokenizer

    @classmethod
    def train(
        cls, texts: Iterable[str], model: Literal["bpe", "unigram"] = "bpe", vocab_size: int = 8000, show_progress: bool = False
    ) -> SubwordTokenizer:
        """Learn a BPE or unigram vocabulary of at most `vocab_size` pieces (specials included) from `texts`;
        `show_progress` draws the tokenizers library's own bars."""
        if model == "bpe":
            tok = HFTokenizer(models.BPE(unk_token=SPECIAL_TOKENS[3]))
            # Specials first, in SPECIAL_TOKENS order, so they take ids 0..3 like every other tokenizer here.
            trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=show_progress)
        elif model == "unigram":
            tok = HFTokenizer(models.Unigram())
            trainer = trainers.UnigramTrainer(
                vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, unk_token=SPECIAL_TOKENS[3], show_progress=show_progress
            )
        else:
            raise ValueError(f"Subword model must be 'bpe' or 'unigram', got {model!r}")
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        tok.train_from_iterator(texts, trainer=trainer)
        if model == "unigram":
            tok = _canonical_unigram(tok)
        return cls(tok)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many texts at once: the Rust side runs them in parallel, ~10x faster than a Python loop."""
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)  # no offsets: 10% faster
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of the pieces up to the first `<eos>`; `<pad>`/`<bos>` skipped, `<unk>` kept visible."""
        return self.tokenizer.decode(content_ids(ids), skip_special_tokens=False)

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "tokenizer": self.tokenizer.to_str()}

    @classmethod
    def from_dict(cls, data: dict) -> SubwordTokenizer:
        return cls(HFTokenizer.from_str(data["tokenizer"]))


def _canonical_unigram(tok: HFTokenizer) -> HFTokenizer:
    """The same unigram model with pieces in a reproducible id order (sorted by string, scores rounded), as the unigram
    trainer's float sums are not (docs/guide/data.md, "Tokenizers")."""
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    n = len(SPECIAL_TOKENS)
    data["model"]["vocab"] = vocab[:n] + sorted([piece, round(score, 8)] for piece, score in vocab[n:])
    return HFTokenizer.from_str(json.dumps(data))


def train_tokenizer(
    texts: Iterable[str], kind: TokenizerKind, vocab_size: int = 8000, show_progress: bool = False
) -> SubwordTokenizer | Vocab:
    """Train a tokenizer of `kind` on `texts` (the training split only: held-out text must not shape the vocabulary):
    "bpe"/"unigram" a `SubwordTokenizer`, "char" or "word" a `Vocab` of the `vocab_size` most frequent tokens (which
    kind fits which language: docs/guide/data.md, "Tokenizers")."""
    if kind in ("bpe", "unigram"):
        return SubwordTokenizer.train(texts, kind, vocab_size, show_progress)
    if kind in ("char", "word"):
        vocab = Vocab.build(texts, level=kind)
        return Vocab(vocab.tokens[:vocab_size], level=kind)
    raise ValueError(f"Tokenizer kind must be one of 'bpe', 'unigram', 'char', 'word', got {kind!r}")


def with_symbols(tokenizer: Tokenizer, symbols: list[str]) -> SubwordTokenizer:
    """`tokenizer` with `symbols` (a multilingual model's language tags, datamodules.languages) added after its
    pieces: each one id, matched in the raw text before any other piece, never split; the spaces around one belong
    to it, so `>>fr<< Ein` and `>>fr<<Ein` are the same ids. Only a subword tokenizer takes symbols."""
    if not isinstance(tokenizer, SubwordTokenizer):
        raise ValueError(f"language tags need a subword tokenizer (bpe or unigram), not {tokenizer.kind!r}")
    tokenizer.tokenizer.add_special_tokens([AddedToken(s, lstrip=True, rstrip=True) for s in symbols])
    return tokenizer


TOKENIZER_KINDS: dict[str, type] = {cls.kind: cls for cls in (Vocab, SubwordTokenizer, SentencePieceVocab)}


def tokenizer_from_dict(data: dict) -> Tokenizer:
    """Rebuild any of the project's tokenizers from its `to_dict()` (a checkpoint's hyperparameters)."""
    try:
        cls = TOKENIZER_KINDS[data["kind"]]
    except (KeyError, TypeError):
        raise ValueError(
            f"Unknown tokenizer data (kind={data.get('kind') if isinstance(data, dict) else data!r}); "
            f"known kinds: {sorted(TOKENIZER_KINDS)}"
        ) from None
    return cls.from_dict(data)


def same_vocabulary(src: dict, tgt: dict) -> bool:
    """Whether two tokenizers' `to_dict()`s number the same pieces alike (one table for both sides): equal, or,
    for Marian's (two SentencePiece models over one `vocab.json`), with the same pieces."""
    return src == tgt or ("pieces" in src and src.get("pieces") == tgt.get("pieces"))
