"""Turning (source, target) sentence pairs into padded id tensors, their lengths padded up to a multiple
when asked (length bucketing, as fairseq's `pad_to_multiple`: a compiled model sees a few static lengths)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

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


def pad_to_multiple(ids: torch.Tensor, multiple: int, pad_id: int = PAD) -> torch.Tensor:
    """(B, T) right-padded ids → (B, ⌈T / multiple⌉ · multiple), the new columns padding."""
    extra = -ids.size(1) % multiple
    return F.pad(ids, (0, extra), value=pad_id) if extra else ids


def bucket_batch(src: torch.Tensor, tgt: torch.Tensor, multiple: int, pad_id: int = PAD) -> Seq2SeqBatch:
    """The batch with source lengths and target-input lengths (T - 1: the model sees tgt[:, :-1]) in buckets
    of `multiple`. The new positions are padding, which the masks hide and the loss ignores: the loss and
    gradients are the unpadded batch's (tests/test_fast_paths.py)."""
    if multiple <= 1:
        return Seq2SeqBatch(src, tgt)
    # The target is split into tgt[:, :-1] and tgt[:, 1:], both T - 1 long: that is the length to bucket.
    tgt = F.pad(tgt, (0, -(tgt.size(1) - 1) % multiple), value=pad_id)
    return Seq2SeqBatch(pad_to_multiple(src, multiple, pad_id), tgt)


def collate_pairs(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], pad_to_multiple: int = 1, pad_id: int = PAD
) -> Seq2SeqBatch:
    """A list of already-encoded (src_ids, tgt_ids) pairs → one padded batch, in length buckets of
    `pad_to_multiple` (`bucket_batch`)."""
    src, tgt = pad_sequences([p[0] for p in pairs], pad_id), pad_sequences([p[1] for p in pairs], pad_id)
    return bucket_batch(src, tgt, pad_to_multiple, pad_id)


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
