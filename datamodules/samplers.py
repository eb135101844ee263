"""Batches that hold a token budget rather than a fixed number of sentences, as in the paper (~25k
source and target tokens per batch): short sentences ride in big batches, long ones in small
batches, and grouping similar lengths keeps padding low. The sampler shards itself across
processes and resumes mid-epoch (see resumable.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import DistributedSampler, Sampler

from .resumable import run_seed


class BatchSamplerView(DistributedSampler):
    """A `ShardedBatchSampler`'s indices, batch after batch, standing in as its `sampler` and as its
    loader's `sampler`. Lightning calls `set_epoch` on `dataloader.batch_sampler.sampler`, not on the
    batch sampler itself; and under DDP it replaces a loader's sampler unless that is a
    `DistributedSampler`, which fails for a batch sampler. The batch sampler shards itself, so this
    view says so, and `Trainer(strategy="ddp")` works without `use_distributed_sampler=False`."""

    def __init__(self, owner: ShardedBatchSampler):  # no super().__init__: it asks for a process group
        self.owner = owner
        self.num_replicas, self.rank, self.shuffle, self.seed = owner.num_replicas, owner.rank, owner.shuffle, owner.seed

    @property
    def epoch(self) -> int:
        return self.owner.epoch

    def set_epoch(self, epoch: int) -> None:
        self.owner.set_epoch(epoch)

    def __iter__(self) -> Iterator[int]:
        return (int(i) for batch in self.owner.batches() for i in batch)

    def __len__(self) -> int:
        return sum(map(len, self.owner.batches()))


class ShardedBatchSampler(Sampler[np.ndarray]):
    """Batches of example indices drawn afresh each epoch from (seed, epoch) by `draw`, this rank's share of them
    (`deal`), minus the first `skip` batches of the next pass (set by `resumable.ResumableDataLoader` on resume)."""

    skip = 0

    def __init__(self, shuffle: bool, seed: int | None, num_replicas: int, rank: int):
        self.shuffle, self.seed = shuffle, run_seed() if seed is None else seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0
        self.sampler = BatchSamplerView(self)
        self._cache: tuple[int, list[np.ndarray]] | None = None

    def draw(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Every process's batches of this epoch, in order."""
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[np.ndarray]:
        """This epoch's batches for this rank (computed once per epoch: `len` and `iter` must agree)."""
        if self._cache is None or self._cache[0] != self.epoch:
            out = self.draw(np.random.default_rng([self.seed, self.epoch]))
            self._cache = (self.epoch, deal(out, self.shuffle, self.num_replicas, self.rank))
        return self._cache[1]

    def __iter__(self) -> Iterator[np.ndarray]:
        skip, self.skip = self.skip, 0
        return iter(self.batches()[skip:])

    def __len__(self) -> int:
        return len(self.batches())


def deal(batches: list, shuffle: bool, num_replicas: int, rank: int) -> list:
    """Rank `rank`'s share of `batches`: every `num_replicas`-th from the `rank`-th on, all ranks the same count or
    DDP hangs on the last step. Training (`shuffle`) drops the remainder (other batches next epoch); evaluation
    repeats the first batches so nothing is left out."""
    if num_replicas == 1 or not batches:
        return batches
    n = len(batches) // num_replicas if shuffle else -(-len(batches) // num_replicas)
    return [batches[i % len(batches)] for i in range(n * num_replicas)][rank::num_replicas]


class TokenBudgetBatchSampler(ShardedBatchSampler):
    """Batches of example indices whose padded size `len(batch) * max(lengths in batch)` stays ≤ `max_tokens`, packed
    greedily in length order, shuffled from seed + epoch with the same count every epoch, dealt across ranks; all
    arrays (why: docs/guide/data.md, "Batches")."""

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        max_tokens: int,
        shuffle: bool = False,
        seed: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.lengths = np.asarray(lengths, dtype=np.int32)
        if len(self.lengths) and self.lengths.max() > max_tokens:
            raise ValueError(f"An example of {self.lengths.max()} tokens cannot fit a token budget of {max_tokens}")
        self.max_tokens = max_tokens
        super().__init__(shuffle, seed, num_replicas, rank)

    def draw(self, rng: np.random.Generator) -> list[np.ndarray]:
        order = rng.permutation(len(self.lengths)) if self.shuffle else np.arange(len(self.lengths))
        order = order[np.argsort(self.lengths[order], kind="stable")]  # equal lengths keep their shuffled order
        out = np.split(order, pack_sorted(self.lengths[order], self.max_tokens)) if len(order) else []
        return [out[i] for i in rng.permutation(len(out))] if self.shuffle else out


def pack_sorted(sorted_lengths: np.ndarray, max_tokens: int) -> np.ndarray:
    """Where greedy packing of ascending lengths cuts: the start of every batch but the first.

    Greedy: a batch takes the next example while (its size + 1) × that example's length ≤ max_tokens.
    With ascending lengths, a run of equal length L holds batches of k = max_tokens // L examples, so
    the cuts of a run are arithmetic: one step per distinct length instead of one per example."""
    values, counts = np.unique(sorted_lengths, return_counts=True)
    cuts: list[np.ndarray] = []
    pos = size = 0  # where the open batch starts, and how many examples it holds
    for length, m in zip(values.tolist(), counts.tolist()):
        k = max(max_tokens // max(length, 1), 1)
        if size:
            joined = min(m, max(k - size, 0))
            size, m = size + joined, m - joined
            if m:  # the next example of this run no longer fits: the open batch closes
                pos += size
                cuts.append(np.array([pos]))
                size = 0
        if m:
            full = (m - 1) // k  # batches of k that close within the run; the last stays open
            cuts.append(pos + k * np.arange(1, full + 1))
            pos += k * full
            size = m - k * full
    return np.concatenate(cuts) if cuts else np.zeros(0, np.int64)


def padding_waste(batches: Sequence[Sequence[int]], src_lens: Sequence[int], tgt_lens: Sequence[int]) -> float:
    """Fraction of the padded source+target positions that are padding."""
    batches = [b for b in batches if len(b)]
    if not batches:
        return 0.0
    sizes = np.fromiter(map(len, batches), dtype=np.int64, count=len(batches))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rows = np.concatenate(batches)
    src, tgt = np.asarray(src_lens)[rows], np.asarray(tgt_lens)[rows]
    padded = (sizes * (np.maximum.reduceat(src, starts) + np.maximum.reduceat(tgt, starts))).sum()
    return float(1 - (src.sum() + tgt.sum()) / padded) if padded else 0.0
