"""Turning (source, target) sentence pairs into padded id tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from .vocab import BOS, EOS, PAD, Tokenizer


class Seq2SeqBatch(NamedTuple):
    src: torch.Tensor  # (B, S) source ids, `<eos>`-terminated, right-padded with PAD
    tgt: torch.Tensor  # (B, T) target ids, `<bos> ... <eos>`, right-padded with PAD


def frame_source(ids: Sequence[int], max_len: int | None = None, eos_id: int = EOS) -> list[int]:
    """Source ids → `ids <eos>`, at most `max_len` long."""
    return [*ids[: None if max_len is None else max_len - 1], eos_id]


def frame_target(ids: Sequence[int], max_len: int | None = None) -> list[int]:
    """Target ids → `<bos> ids <eos>`, at most `max_len` long."""
    return [BOS, *ids[: None if max_len is None else max_len - 2], EOS]


def encode_source(tokenizer: Tokenizer, text: str, max_len: int | None = None) -> list[int]:
    return frame_source(tokenizer.encode(text), max_len)


def encode_target(tokenizer: Tokenizer, text: str, max_len: int | None = None) -> list[int]:
    return frame_target(tokenizer.encode(text), max_len)


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = PAD) -> torch.Tensor:
    """Right-pad to the longest sequence of this batch: (B, max_len) long."""
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def collate_pairs(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Seq2SeqBatch:
    """A list of already-encoded (src_ids, tgt_ids) pairs → one padded batch."""
    return Seq2SeqBatch(pad_sequences([p[0] for p in pairs]), pad_sequences([p[1] for p in pairs]))


def map_in_length_batches(fn, texts: list[str], batch_size: int, on_batch=None) -> list:
    """`fn(batch)` over `texts` in batches of similar length (less padding), results in input order:
    how both translation engines (tasks.Seq2SeqTransformer, deploy.ctranslate2) translate many sentences.
    `on_batch(batch)`, when given, is called after each batch is done (progress lines)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = [texts[i] for i in chunk]
        for i, result in zip(chunk, fn(batch)):
            out[i] = result
        if on_batch is not None:
            on_batch(batch)
    return out
