"""The data module of real parallel corpora: Tatoeba/manythings (one file, e.g. Chinese–English, split
here), line-aligned sets (Multi30k, splits given) and Hugging Face `datasets` corpora. Where the pairs come
from: sources.py; their tokenizers and token ids, prepared once into a cache: preparation.py; the
token-budget batches: samplers.py.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from common.errors import DataFormatError, DataNotFoundError, HyperparameterError
from models.checks import at_least, check_hparams, fraction, no_more_than, one_of

from .corpus_readers import Pair
from .indexed import TokenPairs, collated
from .preparation import PreparedCorpus
from .resumable import ResumableDataLoader, shard_of
from .samplers import ShardedBatchSampler, TokenBudgetBatchSampler, padding_waste
from .sources import ENGLISH
from .tokenizers import TokenizerKind
from .vocab import SPECIAL_TOKENS, Tokenizer


def checkpoint_tokenizers(path: str | Path) -> dict:
    """The tokenizers (`{"src": …, "tgt": …}`, as `to_dict()`s) stored in a translation checkpoint of ours, e.g.
    scripts/import_pretrained.py's: what a fine-tuning encodes its corpus with."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"tokenizers_from: checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        tokenizers = state["hyper_parameters"]["tokenizers"]
        tokenizers["src"], tokenizers["tgt"]  # noqa: B018 (both present, or KeyError)
    except Exception as err:  # unreadable, not a checkpoint, or one without tokenizers: each is the same error
        what = f"holds no translation checkpoint's tokenizers ({type(err).__name__})"
        raise DataFormatError(f"tokenizers_from: {path} {what}") from None
    return tokenizers


class SplitLoaders:
    """The loaders of a data module whose `_datasets[split]` are prepared pairs (`TokenPairs`, `ConcatPairs`) and
    `_new_sampler(split, world, rank)` their batch sampler, which shards itself across processes. The training loader
    resumes mid-epoch (see resumable.py); evaluation loaders always run whole."""

    @property
    def pad_to_multiple(self) -> int:
        """The multiple that batch lengths are padded up to, linked to the model's by scripts/fit.py (its
        compiled graphs are one per length bucket)."""
        return self.hparams.pad_to_multiple

    def _sampler(self, split: str) -> ShardedBatchSampler:
        """The split's batch sampler for this process, made once (its epoch's batches, drawn for the log at
        setup, then serve the loader: a WMT epoch takes a second or two to draw)."""
        key = (split, *shard_of(self))
        if key not in self._samplers:
            self._samplers[key] = self._new_sampler(*key)
        return self._samplers[key]

    def _loader(self, split: str) -> DataLoader:
        self.setup()
        dataset, batch_sampler, workers = self._datasets[split], self._sampler(split), self.hparams.num_workers
        loader = (ResumableDataLoader if split == "train" else DataLoader)(
            dataset,
            batch_sampler=batch_sampler,
            collate_fn=functools.partial(collated, pad_to_multiple=self.pad_to_multiple, pad_id=dataset.pad_id),
            num_workers=workers,
            persistent_workers=workers > 0,
        )
        # DataLoader forbids setting `sampler` once built (and taking one with a batch sampler); the batch
        # sampler shards itself across processes, and its view tells Lightning so (see BatchSamplerView).
        object.__setattr__(loader, "sampler", batch_sampler.sampler)
        return loader

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")


class ParallelCorpusDataModule(SplitLoaders, L.LightningDataModule):
    """Sentence pairs from a Tatoeba file (split here) or line-aligned files (splits given), token-budget batches.

    Defaults: Tatoeba Chinese→English in `data/cmn-eng` (inside the project, downloaded there when
    online), Chinese as characters, English as BPE. For Multi30k use
    `data_dir=data/multi30k, format=aligned, src_lang=de, tgt_lang=en`.
    `__init__` reads nothing; the files are read (and downloaded if allowed) on first need, and the
    tokenizers are trained on the training split the first time `tokenizers` is read.
    """

    def __init__(
        self,
        data_dir: str = "data/cmn-eng",  # relative to the working directory (the project's root)
        format: Literal["tatoeba", "aligned", "hf"] = "tatoeba",
        src_lang: str = "cmn",
        tgt_lang: str = "en",
        train_prefix: str = "train",  # with format=hf, the names of the dataset's splits
        val_prefix: str = "val",
        test_prefix: str = "test_2016_flickr",
        src_tokenizer: TokenizerKind = "char",
        tgt_tokenizer: TokenizerKind = "bpe",
        src_vocab_size: int = 8000,
        tgt_vocab_size: int = 8000,
        shared_vocab: bool = False,
        max_tokens: int = 4096,
        max_len: int = 128,
        overlong: Literal["drop", "truncate"] = "drop",
        val_fraction: float = 0.05,
        test_fraction: float = 0.05,
        split_seed: int = 42,  # fixes which pairs are held out, whatever the run's seed
        num_workers: int = 0,
        download: bool = True,
        tokenizer_sample: int = 1_000_000,  # training pairs the subword models learn from, drawn at random
        cache_dir: str | None = None,  # where the prepared corpus goes (default: <data_dir>/.cache, see cache.py)
        dataset: str | None = None,  # format=hf: a Hugging Face hub dataset (wmt14); None reads local files in data_dir
        dataset_config: str | None = None,  # format=hf: its configuration (de-en)
        tokenizers_from: str | None = None,  # a checkpoint whose tokenizers to use, not trained ones (fine-tuning)
        pad_to_multiple: int = 1,  # length bucketing: batch lengths padded up to a multiple (batching.bucket_batch)
    ):
        super().__init__()
        check_corpus_settings(locals(), type(self).__name__)
        # Kept out of the loggers' hyper-parameters, which Lightning merges with the model's and refuses when a
        # name differs (data max_len 32 for a model of max_len 128 is a real experiment); the run's config.yaml
        # and W&B's `config` record the data's settings.
        self.save_hyperparameters(logger=False)
        self.data_dir = Path(data_dir)
        self.corpus = PreparedCorpus(self.hparams)  # the source's pairs, tokenizers and token ids; reads nothing yet
        if tokenizers_from:
            self.corpus.use_tokenizers(checkpoint_tokenizers(tokenizers_from))
        self._datasets: dict[str, TokenPairs] | None = None
        self._samplers: dict[tuple[str, int, int], TokenBudgetBatchSampler] = {}

    # -- tokenizers ----------------------------------------------------------------------------------------

    @property
    def src_vocab(self) -> Tokenizer:
        """The source tokenizer object (trained on first use); named like `ToyTranslationDataModule.src_vocab`."""
        return self.corpus.tokenizers()[0]

    @property
    def tgt_vocab(self) -> Tokenizer:
        return self.corpus.tokenizers()[1]

    @property
    def tokenizers(self) -> dict:
        """JSON-able tokenizers `{"src": …, "tgt": …}`, linked to the model's `tokenizers` argument by the CLI."""
        src, tgt = self.corpus.tokenizers()
        return {"src": src.to_dict(), "tgt": tgt.to_dict()}

    @tokenizers.setter
    def tokenizers(self, data: dict) -> None:
        """Use given tokenizers (e.g. a checkpoint's) instead of training new ones."""
        self.corpus.use_tokenizers(data)
        self._datasets, self._samplers = None, {}

    # -- loaders -------------------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Download missing files, train the tokenizers and encode every split into the cache, unless a
        complete cache exists (Lightning calls this on one process per node before `setup`)."""
        self.corpus.prepare()

    def setup(self, stage: str | None = None) -> None:
        """Memory-map every split of the prepared corpus (preparing it first if no process has)."""
        if self._datasets is not None:
            return
        self._datasets = self.corpus.splits()
        h, (_, meta) = self.hparams, self.corpus.ids()
        for split, stats in meta["splits"].items():
            action = "dropped" if split == "train" and h.overlong == "drop" else "truncated"
            data = self._datasets[split]
            batches = self._sampler(split).batches()
            waste = padding_waste(batches, data.src.lengths(), data.tgt.lengths())
            empty = f", {stats['empty']:,} with an empty side dropped" if stats.get("empty") else ""
            rank_zero_info(
                f"{split}: {stats['pairs']:,} pairs, {stats['overlong']:,} longer than max_len={h.max_len} {action}{empty}, "
                f"{len(batches):,} batches of ≤{h.max_tokens} tokens, padding waste {waste:.1%}"
            )

    def _new_sampler(self, split: str, world: int, rank: int) -> TokenBudgetBatchSampler:
        lengths, train = self._datasets[split].lengths(), split == "train"
        return TokenBudgetBatchSampler(lengths, self.hparams.max_tokens, shuffle=train, num_replicas=world, rank=rank)

    # -- raw text for BLEU ---------------------------------------------------------------------------------

    def train_pairs(self) -> list[Pair]:
        """(source, target) strings of the training split: read into memory, so for small corpora only."""
        return list(self.corpus.source.pairs("train"))

    def val_pairs(self) -> list[Pair]:
        """(source, reference) strings of the validation split, untokenized, in file/split order."""
        return list(self.corpus.source.pairs("val"))

    def test_pairs(self) -> list[Pair]:
        """(source, reference) strings of the test split, untokenized: what BLEU is computed on."""
        return list(self.corpus.source.pairs("test"))


def check_corpus_settings(values: Mapping[str, Any], owner: str = "ParallelCorpusDataModule") -> None:
    """`HyperparameterError` naming every argument of `ParallelCorpusDataModule` out of range or inconsistent
    with another, before any file is read (scripts/prepare.py checks a recipe's data settings with it too)."""
    kinds = one_of(get_args(TokenizerKind))
    check_hparams(
        owner,
        values,
        {
            "format": one_of(("tatoeba", "aligned", "hf")),
            "src_tokenizer": kinds,
            "tgt_tokenizer": kinds,
            "src_vocab_size": at_least(len(SPECIAL_TOKENS) + 1),
            "tgt_vocab_size": at_least(len(SPECIAL_TOKENS) + 1),
            "max_tokens": at_least(3),
            "max_len": at_least(3),
            "overlong": one_of(("drop", "truncate")),
            "val_fraction": fraction,
            "test_fraction": fraction,
            "num_workers": at_least(0),
            "tokenizer_sample": at_least(1),
            "pad_to_multiple": at_least(1),
        },
        no_more_than("max_len", "max_tokens"),
        lambda h: (
            (held_out := h["val_fraction"] + h["test_fraction"]) < 1
            or f"val_fraction + test_fraction = {held_out:g} leaves nothing for training"
        ),
    )
    v = values
    if v["format"] == "tatoeba" and (v["src_lang"] in ENGLISH) == (v["tgt_lang"] in ENGLISH):
        raise HyperparameterError(f"A Tatoeba file pairs English with one other language; got {v['src_lang']}→{v['tgt_lang']}")
    if v["shared_vocab"] and (v["src_tokenizer"], v["src_vocab_size"]) != (v["tgt_tokenizer"], v["tgt_vocab_size"]):
        raise HyperparameterError(
            "shared_vocab=True trains one tokenizer for both sides: give src_tokenizer/tgt_tokenizer and "
            f"src_vocab_size/tgt_vocab_size the same values (got {v['src_tokenizer']}/{v['tgt_tokenizer']}, "
            f"{v['src_vocab_size']}/{v['tgt_vocab_size']})"
        )
