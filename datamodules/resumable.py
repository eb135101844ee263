"""Training loaders that a run killed mid-epoch resumes exactly: the same order, no batch twice. A loader's state is
the number of batches handed out this epoch, and the order a function of (seed, epoch) alone (docs/guide/data.md,
"Resumable loaders")."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sized

import torch
from torch.utils.data import DataLoader, DistributedSampler


def shard_of(datamodule) -> tuple[int, int]:
    """(num_replicas, rank) of the trainer the data module is attached to; (1, 0) without one."""
    trainer = getattr(datamodule, "trainer", None)
    return (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)


def run_seed() -> int:
    """The run's seed: the one `seed_everything` set (PL_GLOBAL_SEED, which DDP's processes inherit),
    or 0, as for Lightning's own sampler. Every rank draws the same shuffle from it."""
    return int(os.environ.get("PL_GLOBAL_SEED", 0))


class ShuffleSampler(DistributedSampler):
    """A permutation drawn from `seed + epoch` (with no `seed`, `run_seed()`: every rank the same), this process's shard
    of it, minus the first `skip` indices of the next pass; a DistributedSampler, so that Lightning leaves it in place
    under DDP (docs/guide/data.md, "Resumable loaders")."""

    skip = 0

    def __init__(self, data: Sized, seed: int | None = None, num_replicas: int = 1, rank: int = 0):
        super().__init__(data, num_replicas=num_replicas, rank=rank, shuffle=True, seed=run_seed() if seed is None else seed)

    def __iter__(self) -> Iterator[int]:
        skip, self.skip = self.skip, 0
        return itertools.islice(super().__iter__(), skip, None)


class ResumableDataLoader(DataLoader):
    """A DataLoader whose state is (epoch, batches handed out in it); see the module's docstring.

    Its ordering object, the sampler or (with `batch_sampler=`) the batch sampler, needs an `epoch`
    and a `skip` attribute, in samples or batches respectively."""

    _yielded = 0
    _resume_at: tuple[int, int] = (0, 0)  # (epoch, batches of it already seen)

    def __init__(self, *args, generator: torch.Generator | None = None, **kwargs):
        # Each pass draws the workers' base seed from `generator`, or from the global RNG if there is
        # none. A resumed run restores the global RNG to its mid-epoch state and must then draw from it
        # exactly as the first run did, so the loader keeps to a generator of its own.
        super().__init__(*args, generator=generator or torch.Generator().manual_seed(0), **kwargs)

    def _orderer(self):
        return self.sampler if self.batch_size is not None else self.batch_sampler

    def _epoch(self) -> int:
        return getattr(self._orderer(), "epoch", 0)

    def __iter__(self):
        return self._counting()

    def _counting(self):
        # A generator: nothing runs until the first batch is asked for, after Lightning's set_epoch.
        (epoch, skip), self._resume_at = self._resume_at, (0, 0)
        if epoch != self._epoch():  # saved after the epoch's last batch: the next one starts afresh
            skip = 0
        if skip:
            orderer = self._orderer()
            if not hasattr(orderer, "skip"):
                raise RuntimeError(f"ResumableDataLoader cannot resume mid-epoch: {type(orderer).__name__} has no `skip`")
            orderer.skip = skip * (self.batch_size or 1)  # samples for a sampler, batches for a batch sampler
        self._yielded = skip
        for batch in super().__iter__():
            self._yielded += 1
            yield batch

    def state_dict(self) -> dict:
        return {"epoch": self._epoch(), "batches_yielded": self._yielded}

    def load_state_dict(self, state: dict) -> None:
        self._resume_at = (int(state.get("epoch", 0)), int(state.get("batches_yielded", 0)))
