"""Several prepared corpora (one a translation direction) behind one index, and the batches drawn across them: a batch
from one direction, never mixed, a direction's share of the batches set by temperature sampling (docs/guide/multilingual.md)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .batching import Seq2SeqBatch
from .indexed import TokenPairs
from .samplers import ShardedBatchSampler, TokenBudgetBatchSampler


def temperature_probabilities(sizes: Sequence[int], temperature: float) -> np.ndarray:
    """p_i ∝ n_i^(1/T), summing to 1."""
    weights = np.asarray(sizes, dtype=np.float64) ** (1.0 / temperature)
    return weights / weights.sum()


class ConcatPairs(torch.utils.data.Dataset):
    """The token pairs of several corpora, corpus after corpus: index `offsets[i] + j` is pair j of corpus i. A
    batch's indices all lie in one corpus (`TemperatureBatchSampler`), which pads them straight from its maps."""

    def __init__(self, parts: Sequence[TokenPairs]):
        self.parts = list(parts)
        self.offsets = np.cumsum([0] + [len(p) for p in self.parts])  # (K + 1,)
        self.pad_id = self.parts[0].pad_id

    def part_of(self, index: int) -> int:
        return int(np.searchsorted(self.offsets, index, side="right")) - 1

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        part = self.part_of(i)
        return self.parts[part][i - int(self.offsets[part])]

    def __getitems__(self, indices) -> Seq2SeqBatch:
        rows = np.asarray(indices, dtype=np.int64)
        part = self.part_of(int(rows[0]))
        if rows.min() < self.offsets[part] or rows.max() >= self.offsets[part + 1]:
            raise ValueError("a batch of ConcatPairs must come from one of its corpora")
        return self.parts[part].__getitems__(rows - self.offsets[part])

    def lengths(self) -> list[np.ndarray]:
        """Each corpus's max(source, target) lengths."""
        return [p.lengths() for p in self.parts]


class TemperatureBatchSampler(ShardedBatchSampler):
    """Token-budget batches (`TokenBudgetBatchSampler`'s packing) of several corpora, each batch from one corpus,
    as indices of their `ConcatPairs`. With `shuffle` (training): each of an epoch's slots draws its corpus with
    `temperature_probabilities`, and the k-th slot of corpus i takes its k-th batch of the epoch (after all of
    them, its batches again in a new order); everything from (seed, epoch). Without: every corpus's batches in
    length order, corpus after corpus. Under DDP each rank takes every `num_replicas`-th batch (`samplers.deal`)."""

    def __init__(
        self,
        lengths: Sequence[np.ndarray],
        max_tokens: int,
        shuffle: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.parts = [TokenBudgetBatchSampler(part, max_tokens, shuffle, seed=0) for part in lengths]
        self.offsets = np.cumsum([0] + [len(part) for part in lengths])  # (K + 1,)
        self.probabilities = temperature_probabilities([len(part) for part in lengths], temperature)
        super().__init__(shuffle, seed, num_replicas, rank)

    def draw(self, rng: np.random.Generator) -> list[np.ndarray]:
        own = [[b + offset for b in part.draw(rng)] for part, offset in zip(self.parts, self.offsets)]
        if not self.shuffle:
            return [b for batches in own for b in batches]
        slots = sum(map(len, own))
        picks = rng.choice(len(own), size=slots, p=self.probabilities)  # (slots,) the corpus of each slot
        out: list[np.ndarray] = [np.zeros(0, np.int64)] * slots
        for i, batches in enumerate(own):
            where = np.flatnonzero(picks == i)
            rounds = -(-len(where) // len(batches))  # more slots than batches: its batches again, reordered
            order = np.concatenate([np.arange(len(batches))] + [rng.permutation(len(batches)) for _ in range(rounds - 1)])
            for slot, b in zip(where, order):
                out[slot] = batches[b]
        return out
