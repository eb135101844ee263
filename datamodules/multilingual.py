"""The data module of a multilingual model: several translation directions over line-aligned files, one joint
tokenizer, the target language as a tag at the start of every source (languages.py), each direction prepared into
the cache by itself, batches drawn across them by temperature (pair_sampling.py), every direction scored by itself
(docs/guide/multilingual.md)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple

import lightning as L
import numpy as np
from lightning.pytorch.utilities import rank_zero_info

from common.errors import HyperparameterError
from common.progress import is_terminal
from models.checks import at_least, check_hparams, finite_above, no_more_than, one_of

from .cache import default_root, digest, file_fingerprint
from .corpus import SplitLoaders
from .corpus_readers import Pair
from .languages import Direction, name, parse_direction, parse_directions, tagged, tags
from .pair_sampling import ConcatPairs, TemperatureBatchSampler
from .preparation import PreparedCorpus, cached_tokenizers
from .sources import SPLITS, AlignedFiles, CorpusSource
from .tokenizers import tokenizer_from_dict, train_tokenizer, with_symbols
from .vocab import SPECIAL_TOKENS, Tokenizer


class EvalSet(NamedTuple):
    """One direction's raw (tagged source, reference) pairs of a split, what the task scores by itself; `in_mean`:
    whether its scores count in the split's mean (a zero-shot direction is reported beside it)."""

    name: str
    pairs: list[Pair]
    in_mean: bool = True


class TaggedPairs(CorpusSource):
    """A direction's `AlignedFiles` with its tags in front of every source sentence."""

    def __init__(self, files: AlignedFiles, direction: Direction, with_source: bool) -> None:
        super().__init__(files.data_dir, *direction, download=files.download)
        self.aligned, self.direction, self.with_source = files, direction, with_source

    def files(self) -> dict[str, Path]:
        return self.aligned.files()

    def describe(self, split: str = "train") -> str:
        return self.aligned.describe(split)

    def fetch(self) -> None:
        self.aligned.fetch()

    def count(self, split: str) -> int | None:
        return self.aligned.count(split)

    def fingerprint(self) -> list:
        return [*self.aligned.fingerprint(), {"tagged": tagged("·", self.direction, self.with_source)}]

    def pairs(self, split: str) -> Iterator[Pair]:
        for src, tgt in self.aligned.pairs(split):
            yield tagged(src, self.direction, self.with_source), tgt


class MultilingualCorpusDataModule(SplitLoaders, L.LightningDataModule):
    """Several directions (`pairs: [de-en, fr-en, cs-en]`) of line-aligned `<prefix>.<lang>` files in `data_dir`, with
    test-only directions (`test_pairs`), training files of a direction's own (`train_prefixes`), source tags and the
    temperature (docs/guide/multilingual.md says what each does). `__init__` reads nothing: the files are read on first need."""

    def __init__(
        self,
        data_dir: str = "data/multi30k",  # relative to the working directory (the project's root)
        pairs: list[str] = ["de-en", "fr-en", "cs-en"],  # noqa: B006 (jsonargparse shows it; never mutated)
        test_pairs: list[str] | None = None,
        source_tags: bool = False,
        temperature: float = 1.0,
        train_prefix: str = "train",
        train_prefixes: dict[str, str] | None = None,
        val_prefix: str = "val",
        test_prefix: str = "test_2016_flickr",
        tokenizer: Literal["bpe", "unigram"] = "bpe",
        vocab_size: int = 8000,
        max_tokens: int = 4096,
        max_len: int = 128,
        overlong: Literal["drop", "truncate"] = "drop",
        split_seed: int = 42,  # which training lines the tokenizer learns from, when they are more than tokenizer_sample
        num_workers: int = 0,
        download: bool = True,
        tokenizer_sample: int = 1_000_000,  # training lines (all languages together) the tokenizer learns from
        cache_dir: str | None = None,  # where the prepared corpora go (default: <data_dir>/.cache, see cache.py)
        pad_to_multiple: int = 1,  # length bucketing: batch lengths padded up to a multiple (batching.bucket_batch)
    ):
        super().__init__()
        check_hparams(
            self,
            locals(),
            {
                "tokenizer": one_of(("bpe", "unigram")),
                "temperature": finite_above(0),
                "max_tokens": at_least(3),
                "max_len": at_least(3),
                "overlong": one_of(("drop", "truncate")),
                "num_workers": at_least(0),
                "tokenizer_sample": at_least(1),
                "pad_to_multiple": at_least(1),
            },
            no_more_than("max_len", "max_tokens"),
        )
        self.directions = parse_directions(pairs, "pairs")
        self.test_only = parse_directions(test_pairs, "test_pairs") if test_pairs else []
        for src, tgt in self.test_only:
            if (src, tgt) in self.directions:  # scored twice, and no longer zero-shot: a slip in the recipe
                raise HyperparameterError(f"test_pairs: {src}-{tgt} is also in pairs (trained); test_pairs are never trained")
        targets, sources = {t for _, t in self.directions}, {s for s, _ in self.directions}
        for src, tgt in self.test_only:
            if tgt not in targets or (source_tags and src not in sources):
                lang, side = (tgt, "into") if tgt not in targets else (src, "from")
                raise HyperparameterError(f"test_pairs: {src}-{tgt} needs a model that translates {side} {lang}; no pair does")
        own = {parse_direction(name, "train_prefixes"): prefix for name, prefix in (train_prefixes or {}).items()}
        for src, tgt in set(own) - set(self.directions):
            raise HyperparameterError(f"train_prefixes: {src}-{tgt} is not in pairs; only a trained direction has training files")
        self.tags = tags(self.directions, source_tags)
        if vocab_size < len(SPECIAL_TOKENS) + len(self.tags) + 1:
            raise HyperparameterError(f"vocab_size={vocab_size} leaves no room beside the specials and {len(self.tags)} tags")
        self.save_hyperparameters(logger=False)  # as ParallelCorpusDataModule's: the run's config.yaml records them
        self.cache_root, elsewhere = (Path(cache_dir), None) if cache_dir else default_root(Path(data_dir))
        if elsewhere:
            rank_zero_info(elsewhere)
        prefixes = {split: self.hparams[f"{split}_prefix"] for split in SPLITS}
        files = {
            d: AlignedFiles(Path(data_dir), *d, download=download, prefixes={**prefixes, "train": own.get(d, train_prefix)})
            for d in self.directions + self.test_only
        }
        self.sources = {d: TaggedPairs(aligned, d, source_tags) for d, aligned in files.items()}
        self.corpora = {d: PreparedCorpus(self._corpus_settings(d), self.sources[d]) for d in self.directions}
        self._tokenizer: Tokenizer | None = None
        self._datasets: dict[str, ConcatPairs] | None = None
        self._samplers: dict[tuple[str, int, int], TemperatureBatchSampler] = {}

    def _corpus_settings(self, direction: Direction) -> dict:
        """A direction's settings as a bilingual corpus's (what identifies its prepared ids in the cache)."""
        h = self.hparams
        kinds = {"src_tokenizer": h.tokenizer, "tgt_tokenizer": h.tokenizer, "src_vocab_size": h.vocab_size}
        return {
            **kinds,
            "tgt_vocab_size": h.vocab_size,
            "shared_vocab": True,
            "format": "aligned",
            "src_lang": direction[0],
            "tgt_lang": direction[1],
            "val_fraction": 0.0,
            "test_fraction": 0.0,
            **{k: h[k] for k in ("split_seed", "max_len", "overlong", "tokenizer_sample")},
            "cache_dir": str(self.cache_root),
        }

    # -- the joint tokenizer -------------------------------------------------------------------------------

    def _language_texts(self) -> Iterator[tuple[str, Iterator[str]]]:
        """Every trained language's training sentences, once each: from the first direction that has it."""
        seen: set[str] = set()
        for direction in self.directions:
            for side, lang in enumerate(direction):
                if lang not in seen:
                    seen.add(lang)
                    yield lang, (pair[side] for pair in self.sources[direction].aligned.pairs("train"))

    def _train_tokenizer(self) -> tuple[Tokenizer, Tokenizer, str]:
        h = self.hparams
        texts = [t for _, lines in self._language_texts() for t in lines if t]
        which = f"all {len(texts):,} training sentences of {', '.join(lang for lang, _ in self._language_texts())}"
        if len(texts) > h.tokenizer_sample:
            keep = np.random.default_rng(h.split_seed).choice(len(texts), h.tokenizer_sample, replace=False)
            texts, which = [texts[i] for i in np.sort(keep)], f"{h.tokenizer_sample:,} of {which} drawn with seed {h.split_seed}"
        joint = train_tokenizer(texts, h.tokenizer, h.vocab_size - len(self.tags), is_terminal())
        joint = with_symbols(joint, self.tags)
        return joint, joint, which

    def joint_tokenizer(self) -> Tokenizer:
        """The one tokenizer of every language, its tags included: given (`tokenizers = ...`), cached, or trained."""
        if self._tokenizer is None:
            h = self.hparams
            files = {}  # each language's file that _language_texts reads: its first direction's
            for d in self.directions:
                for lang in d:
                    files.setdefault(lang, self.sources[d].aligned.files()[f"train.{lang}"])
            for d in self.directions:
                self.sources[d].fetch()
            key = {
                "files": [file_fingerprint(files[lang]) for lang in sorted(files)],
                **{k: h[k] for k in ("tokenizer", "vocab_size", "tokenizer_sample", "split_seed")},
                "tags": self.tags,
            }
            folder = self.cache_root / f"tokenizers-multilingual-{digest(key)}"
            self.tokenizers = {"src": cached_tokenizers(folder, key, self._train_tokenizer)[0].to_dict()}
        return self._tokenizer

    @property
    def src_vocab(self) -> Tokenizer:
        return self.joint_tokenizer()

    @property
    def tgt_vocab(self) -> Tokenizer:
        return self.joint_tokenizer()

    @property
    def tokenizers(self) -> dict:
        """JSON-able `{"src": …, "tgt": …}` (one tokenizer twice), linked to the model's `tokenizers` by the CLI."""
        data = self.joint_tokenizer().to_dict()
        return {"src": data, "tgt": data}

    @tokenizers.setter
    def tokenizers(self, data: dict) -> None:
        """Use a given tokenizer (a checkpoint's `{"src": …}`) instead of training one."""
        self._tokenizer = tokenizer_from_dict(data["src"])
        for corpus in self.corpora.values():
            corpus.use_tokenizers({"src": data["src"], "tgt": data["src"]})
        self._datasets, self._samplers = None, {}

    # -- loaders -------------------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Train the tokenizer and encode every direction's splits into the cache, unless they are there."""
        self.joint_tokenizer()
        for corpus in self.corpora.values():
            corpus.prepare()

    def setup(self, stage: str | None = None) -> None:
        """Memory-map every direction's splits, one `ConcatPairs` a split, directions in `pairs` order."""
        if self._datasets is not None:
            return
        self.joint_tokenizer()
        by_direction = {d: corpus.splits() for d, corpus in self.corpora.items()}
        self._datasets = {split: ConcatPairs([by_direction[d][split] for d in self.directions]) for split in SPLITS}
        probabilities = self._sampler("train").probabilities
        for d, p in zip(self.directions, probabilities):
            stats = self.corpora[d].ids()[1]["splits"]
            counts = ", ".join(f"{split} {stats[split]['pairs']:,}" for split in SPLITS)
            kinds = (("overlong", "over max_len"), ("empty", "with an empty side"))
            dropped = [f"{stats['train'][k]:,} {what}" for k, what in kinds
                       if stats["train"].get(k) and (k == "empty" or self.hparams.overlong == "drop")]  # fmt: skip
            rank_zero_info(
                f"{name(d)}: {counts} pairs{' (training: ' + ', '.join(dropped) + ' dropped)' if dropped else ''}; "
                f"{p:.1%} of the training batches (temperature {self.hparams.temperature:g})"
            )

    def _new_sampler(self, split: str, world: int, rank: int) -> TemperatureBatchSampler:
        lengths, h = self._datasets[split].lengths(), self.hparams
        return TemperatureBatchSampler(lengths, h.max_tokens, split == "train", h.temperature, num_replicas=world, rank=rank)

    # -- raw text for BLEU ---------------------------------------------------------------------------------

    def eval_sets(self, stage: str) -> list[EvalSet]:
        """Each direction's (tagged source, reference) pairs of `stage` ("val" or "test"), scored apart by the task
        (tasks.Seq2SeqTransformer); at test, the `test_pairs` too, outside the mean."""
        extra = self.test_only if stage == "test" else []
        return [EvalSet(name(d), list(self.sources[d].pairs(stage)), d in self.directions) for d in self.directions + extra]

    def _interleaved(self, stage: str) -> list[Pair]:
        # One sentence of each direction in turn: a summary's first few samples show every direction.
        sets = [s.pairs for s in self.eval_sets(stage) if s.in_mean]
        return [p for group in itertools.zip_longest(*sets) for p in group if p is not None]

    def val_pairs(self) -> list[Pair]:
        return self._interleaved("val")

    def test_pairs(self) -> list[Pair]:
        return self._interleaved("test")
