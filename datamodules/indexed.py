"""Token ids of a whole split in two flat files, `.bin` and `.idx`, read through memory maps (fairseq's indexed
dataset, simplified), so a corpus never has to fit in memory (docs/guide/data.md, "The cache")."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch

from common.errors import DataCacheError
from common.files import fsync

from .batching import Seq2SeqBatch, bucket_batch
from .vocab import PAD


def ids_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


class IndexedIdsWriter:
    """Appends framed id lists to `<prefix>.bin` and their offsets to `<prefix>.idx` (written on `close`)."""

    def __init__(self, prefix: Path, dtype: np.dtype):
        self.prefix, self.dtype = prefix, dtype
        self._bin = open(prefix.with_name(prefix.name + ".bin"), "wb")  # noqa: SIM115 (closed by close())
        self._lengths: list[np.ndarray] = []

    def add_framed(self, seqs: list[list[int]], keep: np.ndarray, max_len: int, head: tuple = (), tail: tuple = ()) -> None:
        """Append `seqs[i]` for each i where `keep[i]`, framed as `head + ids + tail` and cut to `max_len` in
        all (the ids are cut, never the frame): `batching.frame_source` / `frame_target` over a whole chunk
        at once, in numpy rather than a Python list per sentence."""
        lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
        flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=self.dtype, count=int(lengths.sum()))
        starts = (np.cumsum(lengths) - lengths)[keep]
        take = np.minimum(lengths[keep], max_len - len(head) - len(tail))  # (K,) ids kept of each sentence
        framed = take + len(head) + len(tail)  # (K,)
        begin = np.cumsum(framed) - framed  # where each framed sentence starts in `out`
        within = np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take)
        out = np.empty(int(framed.sum()), dtype=self.dtype)
        out[np.repeat(begin + len(head), take) + within] = flat[np.repeat(starts, take) + within]
        for j, token in enumerate(head):
            out[begin + j] = token
        for j, token in enumerate(tail):
            out[begin + len(head) + take + j] = token
        self._bin.write(out.tobytes())
        self._lengths.append(framed)

    def close(self) -> tuple[int, int]:
        """Flush both files to disk; returns (sentences, tokens) written."""
        self._bin.close()
        fsync(self._bin.name)
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        idx = self.prefix.with_name(self.prefix.name + ".idx")
        idx.write_bytes(offsets.tobytes())
        fsync(idx)
        return len(lengths), int(offsets[-1])


class IndexedIds:
    """Read-only view of one `<prefix>.bin/.idx` pair; the maps open lazily, in whichever process reads."""

    def __init__(self, prefix: Path, dtype: np.dtype):
        self.prefix, self.dtype = prefix, np.dtype(dtype)
        self._offsets: np.ndarray | None = None
        self._ids: np.ndarray | None = None

    def _open(self) -> None:
        # Plain ndarray views of the maps: np.memmap's own indexing costs microseconds a call.
        self._offsets = np.memmap(self.prefix.with_name(self.prefix.name + ".idx"), dtype=np.int64, mode="r").view(np.ndarray)
        bin_path = self.prefix.with_name(self.prefix.name + ".bin")
        # An empty file cannot be mapped; a split of empty sentences does not exist (each holds <eos>).
        size = bin_path.stat().st_size
        self._ids = np.memmap(bin_path, dtype=self.dtype, mode="r").view(np.ndarray) if size else np.zeros(0, self.dtype)

    @property
    def offsets(self) -> np.ndarray:
        if self._offsets is None:
            self._open()
        return self._offsets

    @property
    def ids(self) -> np.ndarray:
        if self._ids is None:
            self._open()
        return self._ids

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)  # (N,) int64

    def check(self, vocab_size: int, remedy: str) -> None:
        """`DataCacheError` naming the file and `remedy` unless the offsets rise from 0 to the number of ids
        and every id lies below `vocab_size` (the ids are unsigned): what a file overwritten in place after
        its build breaks, and what would otherwise reach the embedding as an index out of range."""
        offsets, ids = self.offsets, self.ids
        idx = self.prefix.with_name(self.prefix.name + ".idx")
        if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(ids) or (np.diff(offsets) < 0).any():
            raise DataCacheError(f"the prepared index {idx} is damaged (its offsets do not frame {len(ids)} ids); {remedy}")
        if len(ids) and int(ids.max()) >= vocab_size:
            bad = int(np.argmax(ids >= vocab_size))
            raise DataCacheError(
                f"the prepared ids {self.prefix.with_name(self.prefix.name + '.bin')} are damaged (id {int(ids[bad])} at "
                f"position {bad}, the vocabulary has {vocab_size}); {remedy}"
            )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def __getstate__(self) -> dict:
        # A DataLoader worker gets the paths, not a pickled copy of the mapped arrays.
        return {**self.__dict__, "_offsets": None, "_ids": None}


def pad_rows(store: IndexedIds, rows: np.ndarray, pad_id: int = PAD) -> torch.Tensor:
    """Sentences `rows` of `store`, right-padded with `pad_id` to the longest: (B, max_len) long.
    One gather from the map and one scatter, not a slice per sentence (8x the tokens/s)."""
    starts = store.offsets[rows]  # (B,)
    lengths = store.offsets[rows + 1] - starts  # (B,)
    row_start = np.zeros(len(rows), np.int64)  # where each sentence begins among the gathered ids
    np.cumsum(lengths[:-1], out=row_start[1:])
    within = np.arange(int(lengths.sum())) - np.repeat(row_start, lengths)  # (N,) position inside its sentence
    out = np.full((len(rows), int(lengths.max())), pad_id, dtype=np.int64)
    out[np.repeat(np.arange(len(rows)), lengths), within] = store.ids[np.repeat(starts, lengths) + within]
    return torch.from_numpy(out)


class TokenPairs(torch.utils.data.Dataset):
    """Aligned (source ids, target ids) of one split, memory-mapped. `__getitems__` (which a DataLoader
    with a batch sampler calls with a whole batch of indices) pads the batch straight from the maps."""

    def __init__(self, src: IndexedIds, tgt: IndexedIds, pad_id: int = PAD):
        if len(src) != len(tgt):
            raise ValueError(f"{src.prefix} holds {len(src)} sentences, {tgt.prefix} {len(tgt)}")
        self.src, self.tgt, self.pad_id = src, tgt, pad_id  # the tokenizers' <pad> (an imported Marian's is its last id)

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        return self.src[i].tolist(), self.tgt[i].tolist()

    def __getitems__(self, indices) -> Seq2SeqBatch:
        rows = np.asarray(indices, dtype=np.int64)
        return Seq2SeqBatch(pad_rows(self.src, rows, self.pad_id), pad_rows(self.tgt, rows, self.pad_id))

    def lengths(self) -> np.ndarray:
        """max(source, target) length of each pair: what a batch's token budget is charged."""
        return np.maximum(self.src.lengths(), self.tgt.lengths())


def collated(batch: Seq2SeqBatch, pad_to_multiple: int = 1, pad_id: int = PAD) -> Seq2SeqBatch:
    """The collate function for `TokenPairs`: its `__getitems__` already built the batch; its lengths are
    padded up to a multiple of `pad_to_multiple` (`batching.bucket_batch`)."""
    return bucket_batch(*batch, pad_to_multiple, pad_id)
