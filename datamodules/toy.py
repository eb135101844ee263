"""The classic three-pair Chinese→English toy set: proves the plumbing in seconds on a CPU."""

from __future__ import annotations

from typing import Iterator, Sized

import lightning as L
import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler

from .batching import collate_pairs, encode_source, encode_target
from .vocab import Vocab

TOY_PAIRS = [
    ("我 是 学 生", "I am a student"),
    ("我 喜 欢 学 习", "I like learning"),
    ("我 是 男 生", "I am a boy"),
]


class ToyTranslationDataModule(L.LightningDataModule):
    """Source split into characters, target into words. Training and validation both use the
    three pairs (there is nothing to hold out); `repeats` copies per epoch give the optimiser
    several steps per epoch instead of one."""

    def __init__(self, batch_size: int = 3, repeats: int = 32, num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.save_hyperparameters()
        self.pairs = list(TOY_PAIRS)
        self.src_vocab = Vocab.build((s for s, _ in self.pairs), level="char")
        self.tgt_vocab = Vocab.build((t for _, t in self.pairs), level="word")

    @property
    def tokenizers(self) -> dict:
        """JSON-able tokenizers, linked to the model's `tokenizers` argument by scripts/fit.py."""
        return {"src": self.src_vocab.to_dict(), "tgt": self.tgt_vocab.to_dict()}

    def _encoded(self) -> list[tuple[list[int], list[int]]]:
        return [(encode_source(self.src_vocab, s), encode_target(self.tgt_vocab, t)) for s, t in self.pairs]

    def train_dataloader(self) -> DataLoader:
        # The order is a function of (seed, epoch) alone, and the loader resumes mid-epoch where it
        # stopped: a run killed and resumed from its last checkpoint sees the same batches.
        data = self._encoded() * self.hparams.repeats
        sampler = EpochShuffleSampler(data, seed=self.hparams.seed)
        return ResumableDataLoader(
            data,
            batch_sampler=SkippingBatchSampler(sampler, self.hparams.batch_size, drop_last=False),
            collate_fn=collate_pairs,
            num_workers=self.hparams.num_workers,
            # Worker seeds come from this generator, not from the global RNG (which a resumed run
            # restores to where it was, and must then draw from exactly as the first run did).
            generator=torch.Generator().manual_seed(self.hparams.seed),
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._encoded(), batch_size=len(self.pairs), collate_fn=collate_pairs)

    def val_pairs(self) -> list[tuple[str, str]]:
        """(source, reference) strings that the task translates and prints after fitting."""
        return list(self.pairs)


class EpochShuffleSampler(Sampler[int]):
    """A random permutation drawn from `seed + epoch` (Lightning calls `set_epoch` before each
    epoch): the order depends on nothing else, so a resumed epoch replays the same order."""

    def __init__(self, data: Sized, seed: int = 0):
        self.n, self.seed, self.epoch = len(data), seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist())

    def __len__(self) -> int:
        return self.n


class SkippingBatchSampler(BatchSampler):
    """A `BatchSampler` that can leave out the first `skip` batches of its next pass (indices only:
    no data is loaded for them). `ResumableDataLoader.load_state_dict` sets `skip`."""

    skip = 0

    def __iter__(self) -> Iterator[list[int]]:
        skip, self.skip = self.skip, 0
        for i, batch in enumerate(super().__iter__()):
            if i >= skip:
                yield batch


class ResumableDataLoader(DataLoader):
    """A DataLoader that Lightning can resume mid-epoch. Lightning stores a loader's `state_dict()`
    in each checkpoint when it has one (and a plain DataLoader has none: a resumed epoch would start
    over and see some batches twice). Here the state is the number of batches handed out in this
    epoch; after `load_state_dict`, the next pass skips that many batches of the same order."""

    _yielded = 0
    _resume_at: tuple[int, int] = (0, 0)  # (epoch, batches of it already seen)

    def _epoch(self) -> int:
        return getattr(getattr(self.batch_sampler, "sampler", None), "epoch", 0)

    def __iter__(self):
        return self._counting()

    def _counting(self):
        # A generator: nothing runs until the first batch is asked for, after Lightning's set_epoch.
        (epoch, skip), self._resume_at = self._resume_at, (0, 0)
        if epoch != self._epoch():  # saved after the epoch's last batch: the next one starts afresh
            skip = 0
        if skip and isinstance(self.batch_sampler, SkippingBatchSampler):
            self.batch_sampler.skip = skip
        elif skip:
            raise RuntimeError("ResumableDataLoader needs a SkippingBatchSampler to resume mid-epoch")
        self._yielded = skip
        for batch in super().__iter__():
            self._yielded += 1
            yield batch

    def state_dict(self) -> dict:
        return {"epoch": self._epoch(), "batches_yielded": self._yielded}

    def load_state_dict(self, state: dict) -> None:
        self._resume_at = (int(state.get("epoch", 0)), int(state.get("batches_yielded", 0)))
