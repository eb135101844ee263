"""The classic three-pair Chinese→English toy set: proves the plumbing in seconds on a CPU."""

from __future__ import annotations

import functools

import lightning as L
from torch.utils.data import DataLoader

from models.checks import at_least, check_hparams

from .batching import collate_pairs, encode_source, encode_target
from .resumable import ResumableDataLoader, ShuffleSampler, shard_of
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

    def __init__(self, batch_size: int = 3, repeats: int = 32, num_workers: int = 0, pad_to_multiple: int = 1):
        super().__init__()
        limits = {"batch_size": at_least(1), "repeats": at_least(1), "num_workers": at_least(0), "pad_to_multiple": at_least(1)}
        check_hparams(self, locals(), limits)
        self.save_hyperparameters(logger=False)  # as ParallelCorpusDataModule's: the run's config.yaml records them
        self.pairs = list(TOY_PAIRS)
        self.src_vocab = Vocab.build((s for s, _ in self.pairs), level="char")
        self.tgt_vocab = Vocab.build((t for _, t in self.pairs), level="word")

    @property
    def tokenizers(self) -> dict:
        """JSON-able tokenizers, linked to the model's `tokenizers` argument by scripts/fit.py."""
        return {"src": self.src_vocab.to_dict(), "tgt": self.tgt_vocab.to_dict()}

    @property
    def pad_to_multiple(self) -> int:
        """The multiple that batch lengths are padded up to (`batching.bucket_batch`), linked to the model's
        by scripts/fit.py."""
        return self.hparams.pad_to_multiple

    def _collate(self) -> functools.partial:
        return functools.partial(collate_pairs, pad_to_multiple=self.pad_to_multiple)

    def _encoded(self) -> list[tuple[list[int], list[int]]]:
        return [(encode_source(self.src_vocab, s), encode_target(self.tgt_vocab, t)) for s, t in self.pairs]

    def train_dataloader(self) -> DataLoader:
        # The order is a function of (the run's seed, epoch) alone, and the loader resumes mid-epoch where it
        # stopped: a run killed and resumed from its last checkpoint sees the same batches.
        data = self._encoded() * self.hparams.repeats
        return ResumableDataLoader(
            data,
            batch_size=self.hparams.batch_size,
            sampler=ShuffleSampler(data, None, *shard_of(self)),
            collate_fn=self._collate(),
            num_workers=self.hparams.num_workers,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self._encoded(), batch_size=len(self.pairs), collate_fn=self._collate())

    def val_pairs(self) -> list[tuple[str, str]]:
        """(source, reference) strings that the task translates and prints after fitting."""
        return list(self.pairs)
