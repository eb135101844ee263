"""A SentencePiece model with its own id table and special ids (`</s>` 0, `<unk>` 1, `<pad>` last, the decoder
starting from `<pad>`): the tokenizer of a Marian (OPUS-MT) model, `encode` being `transformers.MarianTokenizer`'s,
stored whole in the checkpoint (docs/guide/data.md, "Tokenizers")."""

from __future__ import annotations

import base64
from collections.abc import Iterable

SPIECE_UNDERLINE = "▁"


class SentencePieceVocab:
    kind = "sentencepiece"

    def __init__(self, model: bytes, pieces: list[str], eos: str = "</s>", unk: str = "<unk>", pad: str = "<pad>"):
        import sentencepiece  # only models imported from Marian need it

        self.model, self.tokens = bytes(model), list(pieces)
        self.index = {piece: i for i, piece in enumerate(self.tokens)}
        missing = [t for t in (eos, unk, pad) if t not in self.index]
        if missing:
            raise ValueError(f"the vocabulary has no {', '.join(missing)}")
        self.eos_id, self.unk_id, self.pad_id = self.index[eos], self.index[unk], self.index[pad]
        self.bos_id = self.pad_id  # Marian's decoder starts from <pad>
        self.special = {self.eos_id, self.unk_id, self.pad_id}
        self.processor = sentencepiece.SentencePieceProcessor(model_proto=self.model)

    @classmethod
    def from_vocab(cls, model: bytes, vocab: dict[str, int], **specials: str) -> SentencePieceVocab:
        """From a piece → id table (`vocab.json`), whose ids must be 0 … n-1."""
        pieces = sorted(vocab, key=vocab.__getitem__)
        if [vocab[p] for p in pieces] != list(range(len(pieces))):
            raise ValueError("the vocabulary's ids are not 0 … n-1, each once")
        return cls(model, pieces, **specials)

    def encode(self, text: str) -> list[int]:
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:  # a multilingual model's target language
            code, text = [text[: end + 2]], text[end + 2 :]
        pieces = code + self.processor.encode(text, out_type=str)
        return [self.index.get(piece, self.unk_id) for piece in pieces]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of the pieces up to the first `</s>`, `<pad>` skipped, `<unk>` kept visible (as MarianTokenizer's)."""
        out, run = "", []
        for i in map(int, ids):
            if i == self.eos_id:
                break
            if i == self.pad_id:
                continue
            if i in self.special:
                out += self.processor.decode_pieces(run) + self.tokens[i] + " "
                run = []
            else:
                run.append(self.tokens[i])
        out += self.processor.decode_pieces(run)
        return out.replace(SPIECE_UNDERLINE, " ").strip()

    def __len__(self) -> int:
        return len(self.tokens)

    def to_dict(self) -> dict:
        names = {"eos": self.tokens[self.eos_id], "unk": self.tokens[self.unk_id], "pad": self.tokens[self.pad_id]}
        return {"kind": self.kind, "model": base64.b64encode(self.model).decode("ascii"), "pieces": self.tokens, **names}

    @classmethod
    def from_dict(cls, data: dict) -> SentencePieceVocab:
        return cls(base64.b64decode(data["model"]), data["pieces"], data["eos"], data["unk"], data["pad"])
