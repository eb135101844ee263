"""The data module of real parallel corpora: Tatoeba/manythings (one file, e.g. Chinese–English, split
here) and line-aligned sets (Multi30k, splits given). Reading the files: corpus_readers.py; the
token-budget batches: samplers.py.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Literal, get_args

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from .batching import collate_pairs, frame_source, frame_target
from .checks import at_least, check_hparams, fraction, no_more_than, one_of
from .corpus_readers import Pair, download, read_aligned, read_tatoeba, split_pairs
from .errors import CorpusFormatError, DataNotFoundError, HyperparameterError
from .resumable import ResumableDataLoader, shard_of
from .samplers import TokenBudgetBatchSampler, padding_waste
from .tokenizers import SubwordTokenizer, TokenizerKind, tokenizer_from_dict, train_tokenizer
from .vocab import SPECIAL_TOKENS, Tokenizer

ENGLISH = ("en", "eng")
SPLITS = ("train", "val", "test")
TATOEBA_URL = "https://www.manythings.org/anki/{lang}-eng.zip"
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"


class ParallelCorpusDataModule(L.LightningDataModule):
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
        format: Literal["tatoeba", "aligned"] = "tatoeba",
        src_lang: str = "cmn",
        tgt_lang: str = "en",
        train_prefix: str = "train",
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
    ):
        super().__init__()
        kinds = one_of(get_args(TokenizerKind))
        check_hparams(
            self,
            locals(),
            {
                "format": one_of(("tatoeba", "aligned")),
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
            },
            no_more_than("max_len", "max_tokens"),
            lambda h: (
                (held_out := h["val_fraction"] + h["test_fraction"]) < 1
                or f"val_fraction + test_fraction = {held_out:g} leaves nothing for training"
            ),
        )
        if format == "tatoeba" and (src_lang in ENGLISH) == (tgt_lang in ENGLISH):
            raise HyperparameterError(f"A Tatoeba file pairs English with one other language; got {src_lang}→{tgt_lang}")
        if shared_vocab and (src_tokenizer, src_vocab_size) != (tgt_tokenizer, tgt_vocab_size):
            raise HyperparameterError(
                "shared_vocab=True trains one tokenizer for both sides: give src_tokenizer/tgt_tokenizer and "
                f"src_vocab_size/tgt_vocab_size the same values (got {src_tokenizer}/{tgt_tokenizer}, "
                f"{src_vocab_size}/{tgt_vocab_size})"
            )
        self.save_hyperparameters()
        self.data_dir = Path(data_dir)
        self._splits: dict[str, list[Pair]] | None = None
        self._tokenizers: tuple[Tokenizer, Tokenizer] | None = None
        self._encoded: dict[str, list[tuple[list[int], list[int]]]] | None = None

    # -- files ---------------------------------------------------------------------------------------------

    def _tatoeba_lang(self) -> str:
        return self.hparams.tgt_lang if self.hparams.src_lang in ENGLISH else self.hparams.src_lang

    def _files(self) -> dict[str, Path]:
        """The files this configuration reads, found or not (gzip preferred over plain for aligned sets)."""
        if self.hparams.format == "tatoeba":
            return {"tatoeba": self.data_dir / f"{self._tatoeba_lang()}.txt"}
        files = {}
        for split in SPLITS:
            prefix = self.hparams[f"{split}_prefix"]
            for lang in (self.hparams.src_lang, self.hparams.tgt_lang):
                gz, plain = self.data_dir / f"{prefix}.{lang}.gz", self.data_dir / f"{prefix}.{lang}"
                files[f"{split}.{lang}"] = plain if plain.exists() and not gz.exists() else gz
        return files

    def prepare_data(self) -> None:
        """Download missing files (Lightning calls this on one process per node before `setup`)."""
        missing = [p for p in self._files().values() if not p.exists()]
        if not missing:
            return
        h = self.hparams
        if h.format == "tatoeba":
            urls = {TATOEBA_URL.format(lang=self._tatoeba_lang()): self.data_dir / f"{self._tatoeba_lang()}-eng.zip"}
            url = next(iter(urls))
            how = f"{missing[0]} not found: download {url} and unzip {missing[0].name} into {self.data_dir}/"
        else:
            urls = {MULTI30K_URL.format(name=p.name): p for p in missing}
            how = (
                f"{', '.join(p.name for p in missing)} not found in {self.data_dir}/: put them there "
                f"(gzip or plain text, line i of .{h.src_lang} translating line i of .{h.tgt_lang})"
            )
        if not h.download:
            raise DataNotFoundError(f"{how}, or pass download=True on a machine that is online")
        for url, dest in urls.items():
            try:
                download(url, dest)
                if dest.suffix == ".zip":
                    with zipfile.ZipFile(dest) as z:
                        z.extract(missing[0].name, self.data_dir)
                    dest.unlink()
            except (OSError, zipfile.BadZipFile, KeyError) as e:
                raise DataNotFoundError(f"{how} (downloading {url} failed: {e})") from None

    def _load(self) -> dict[str, list[Pair]]:
        """Raw (source, target) sentence pairs per split, read once."""
        if self._splits is None:
            self.prepare_data()
            files = self._files()
            h = self.hparams
            if h.format == "tatoeba":
                pairs = read_tatoeba(files["tatoeba"])
                # Split in the file's (english, other) orientation so that cmn→en and en→cmn share a test set.
                splits = dict(zip(SPLITS, split_pairs(pairs, h.val_fraction, h.test_fraction, h.split_seed)))
                if h.src_lang not in ENGLISH:
                    splits = {k: [(o, e) for e, o in v] for k, v in splits.items()}
                self._splits = splits
            else:
                self._splits = {s: read_aligned(files[f"{s}.{h.src_lang}"], files[f"{s}.{h.tgt_lang}"]) for s in SPLITS}
            if not self._splits["train"]:
                n = sum(map(len, self._splits.values()))
                self._splits = None
                raise CorpusFormatError(
                    f"{self._train_files()}: its {n} pairs leave none for training after "
                    f"val_fraction={h.val_fraction} and test_fraction={h.test_fraction}"
                )
        return self._splits

    def _train_files(self) -> str:
        """The file(s) the training pairs come from, for error messages."""
        files, h = self._files(), self.hparams
        if h.format == "tatoeba":
            return str(files["tatoeba"])
        return f"{files[f'train.{h.src_lang}']} and {files[f'train.{h.tgt_lang}']}"

    # -- tokenizers ----------------------------------------------------------------------------------------

    def _build_tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        if self._tokenizers is None:
            train = self._load()["train"]
            h = self.hparams
            if h.shared_vocab:  # one subword model for related languages (de–en): the model can tie all embeddings
                shared = train_tokenizer([s for s, _ in train] + [t for _, t in train], h.src_tokenizer, h.src_vocab_size)
                self._tokenizers = (shared, shared)
            else:
                self._tokenizers = (
                    train_tokenizer([s for s, _ in train], h.src_tokenizer, h.src_vocab_size),
                    train_tokenizer([t for _, t in train], h.tgt_tokenizer, h.tgt_vocab_size),
                )
        return self._tokenizers

    @property
    def src_vocab(self) -> Tokenizer:
        """The source tokenizer object (trained on first use); named like `ToyTranslationDataModule.src_vocab`."""
        return self._build_tokenizers()[0]

    @property
    def tgt_vocab(self) -> Tokenizer:
        return self._build_tokenizers()[1]

    @property
    def tokenizers(self) -> dict:
        """JSON-able tokenizers `{"src": …, "tgt": …}`, linked to the model's `tokenizers` argument by the CLI."""
        src, tgt = self._build_tokenizers()
        return {"src": src.to_dict(), "tgt": tgt.to_dict()}

    @tokenizers.setter
    def tokenizers(self, data: dict) -> None:
        """Use given tokenizers (e.g. a checkpoint's) instead of training new ones."""
        self._tokenizers = (tokenizer_from_dict(data["src"]), tokenizer_from_dict(data["tgt"]))
        self._encoded = None

    # -- encoding and loaders ------------------------------------------------------------------------------

    @staticmethod
    def _encode_all(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
        return tok.encode_batch(texts) if isinstance(tok, SubwordTokenizer) else [tok.encode(t) for t in texts]

    def setup(self, stage: str | None = None) -> None:
        """Encode every split once. Overlong training pairs are dropped (or truncated with overlong="truncate");
        validation and test pairs are always truncated, never dropped, so the evaluation sets stay whole."""
        if self._encoded is not None:
            return
        src_tok, tgt_tok = self._build_tokenizers()
        h = self.hparams
        self._encoded = {}
        for split, pairs in self._load().items():
            src_ids = self._encode_all(src_tok, [s for s, _ in pairs])
            tgt_ids = self._encode_all(tgt_tok, [t for _, t in pairs])
            encoded, n_long = [], 0
            for s, t in zip(src_ids, tgt_ids):
                # +1 for <eos> on the source, +2 for <bos>/<eos> on the target (see batching.encode_*).
                if len(s) + 1 > h.max_len or len(t) + 2 > h.max_len:
                    n_long += 1
                    if split == "train" and h.overlong == "drop":
                        continue
                # An empty sentence (a blank line in an aligned corpus) teaches nothing: drop it from training.
                if split == "train" and (not s or not t):
                    continue
                encoded.append((frame_source(s, h.max_len), frame_target(t, h.max_len)))
            if split == "train" and not encoded:
                self._encoded = None
                raise CorpusFormatError(
                    f"{self._train_files()}: none of the {len(pairs)} training pairs is usable ({n_long} longer than "
                    f"max_len={h.max_len}, the others with an empty side); raise max_len or set overlong=truncate"
                )
            self._encoded[split] = encoded
            action = "dropped" if split == "train" and h.overlong == "drop" else "truncated"
            batches = self._sampler(split).batches()
            waste = padding_waste(batches, [len(s) for s, _ in encoded], [len(t) for _, t in encoded])
            rank_zero_info(
                f"{split}: {len(encoded)} pairs, {n_long} longer than max_len={h.max_len} {action}, "
                f"{len(batches)} batches of ≤{h.max_tokens} tokens, padding waste {waste:.1%}"
            )

    def _sampler(self, split: str) -> TokenBudgetBatchSampler:
        world, rank = shard_of(self)
        return TokenBudgetBatchSampler(
            [max(len(s), len(t)) for s, t in self._encoded[split]],
            self.hparams.max_tokens,
            shuffle=split == "train",
            num_replicas=world,
            rank=rank,
        )

    def _loader(self, split: str) -> DataLoader:
        self.setup()
        # The training loader resumes mid-epoch (see resumable.py); evaluation loaders always run whole.
        loader_class = ResumableDataLoader if split == "train" else DataLoader
        batch_sampler = self._sampler(split)
        loader = loader_class(
            self._encoded[split],
            batch_sampler=batch_sampler,
            collate_fn=collate_pairs,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
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

    # -- raw text for BLEU ---------------------------------------------------------------------------------

    def train_pairs(self) -> list[Pair]:
        return list(self._load()["train"])

    def val_pairs(self) -> list[Pair]:
        """(source, reference) strings of the validation split, untokenized, in file/split order."""
        return list(self._load()["val"])

    def test_pairs(self) -> list[Pair]:
        """(source, reference) strings of the test split, untokenized: what BLEU is computed on."""
        return list(self._load()["test"])
