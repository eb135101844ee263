"""Token vocabularies shared by every translation data module and by `Seq2SeqTransformer`: every tokenizer of the
project uses the same four special ids and serialises to plain JSON-able data (`to_dict`) for the checkpoint."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal, Protocol

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]


def content_ids(ids: Iterable[int]) -> list[int]:
    """The ids a decoder produced before its first `<eos>`, with `<pad>` and `<bos>` dropped."""
    out = []
    for i in map(int, ids):
        if i == EOS:
            break
        if i not in (PAD, BOS):
            out.append(i)
    return out


class Tokenizer(Protocol):
    """What the translation task needs from a tokenizer: text ↔ ids, and its special ids (PAD, BOS, EOS, UNK
    for ours; an imported Marian model's own, datamodules.sentencepiece)."""

    pad_id: int
    bos_id: int  # what the decoder starts from
    eos_id: int
    unk_id: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Iterable[int]) -> str: ...
    def __len__(self) -> int: ...
    def to_dict(self) -> dict: ...


class Vocab:
    """A closed vocabulary over characters (`level="char"`, whitespace dropped: 我 是 → 我, 是)
    or whitespace-separated words (`level="word"`). Unknown tokens map to `<unk>`."""

    kind = "vocab"
    pad_id, bos_id, eos_id, unk_id = PAD, BOS, EOS, UNK

    def __init__(self, tokens: list[str], level: Literal["char", "word"] = "word"):
        if level not in ("char", "word"):
            raise ValueError(f"Vocab level must be 'char' or 'word', got {level!r}")
        if tokens[: len(SPECIAL_TOKENS)] != SPECIAL_TOKENS:
            tokens = SPECIAL_TOKENS + [t for t in tokens if t not in SPECIAL_TOKENS]
        self.tokens = list(tokens)
        self.level = level
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def build(cls, texts: Iterable[str], level: Literal["char", "word"] = "word", min_freq: int = 1) -> Vocab:
        counts = Counter(tok for text in texts for tok in cls.split(text, level))
        # Most frequent first, ties alphabetical: the same corpus always gives the same ids.
        tokens = [t for t, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= min_freq]
        return cls(tokens, level)

    @staticmethod
    def split(text: str, level: str) -> list[str]:
        return [ch for ch in text if not ch.isspace()] if level == "char" else text.split()

    def encode(self, text: str) -> list[int]:
        return [self.index.get(tok, UNK) for tok in self.split(text, self.level)]

    def decode(self, ids: Iterable[int]) -> str:
        """Tokens up to the first `<eos>`, specials other than `<unk>` skipped."""
        return ("" if self.level == "char" else " ").join(self.tokens[i] for i in content_ids(ids))

    def __len__(self) -> int:
        return len(self.tokens)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "level": self.level, "tokens": self.tokens}

    @classmethod
    def from_dict(cls, data: dict) -> Vocab:
        return cls(data["tokens"], data["level"])
