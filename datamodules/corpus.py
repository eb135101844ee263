"""The data module of real parallel corpora: Tatoeba/manythings (one file, e.g. Chinese–English, split
here) and line-aligned sets (Multi30k, splits given). Reading the files: corpus_readers.py; the
token-budget batches: samplers.py.
"""

from __future__ import annotations

import json
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, get_args

import lightning as L
import numpy as np
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from models.checks import at_least, check_hparams, fraction, no_more_than, one_of
from models.errors import CorpusFormatError, DataCacheError, DataNotFoundError, HyperparameterError

from . import hf_source
from .cache import default_root, digest, file_fingerprint, open_or_build
from .corpus_readers import Pair, download, iter_aligned, read_tatoeba, split_pairs
from .indexed import IndexedIds, IndexedIdsWriter, TokenPairs, collated, ids_dtype
from .progress import StageBar, is_terminal
from .resumable import ResumableDataLoader, shard_of
from .samplers import TokenBudgetBatchSampler, padding_waste
from .tokenizers import SubwordTokenizer, TokenizerKind, tokenizer_from_dict, train_tokenizer
from .vocab import BOS, EOS, SPECIAL_TOKENS, Tokenizer

TOKENIZERS_FILE = "tokenizers.json"  # in the prepared tokenizers' folder

ENGLISH = ("en", "eng")
SPLITS = ("train", "val", "test")
TATOEBA_URL = "https://www.manythings.org/anki/{lang}-eng.zip"
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"
ENCODE_CHUNK = 100_000  # pairs encoded at a time: bounds the memory of preparing a corpus of any size


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
    ):
        super().__init__()
        kinds = one_of(get_args(TokenizerKind))
        check_hparams(
            self,
            locals(),
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
        # Kept out of the loggers' hyper-parameters, which Lightning merges with the model's and refuses when a
        # name differs (data max_len 32 for a model of max_len 128 is a real experiment); the run's config.yaml
        # and W&B's `config` record the data's settings.
        self.save_hyperparameters(logger=False)
        self.data_dir = Path(data_dir)
        self._splits: dict | None = None  # tatoeba: the pairs of each split; hf: each split's `datasets.Dataset`
        self._source: dict | None = None  # what identifies the raw pairs (`_source_key`)
        self._ids_path: Path | None = None  # the prepared ids' folder and its meta.json (see cache.py)
        self._ids_meta: dict | None = None
        self._tokenizers: tuple[Tokenizer, Tokenizer] | None = None
        self._datasets: dict[str, TokenPairs] | None = None
        self._samplers: dict[tuple[str, int, int], TokenBudgetBatchSampler] = {}

    # -- files ---------------------------------------------------------------------------------------------

    def _tatoeba_lang(self) -> str:
        return self.hparams.tgt_lang if self.hparams.src_lang in ENGLISH else self.hparams.src_lang

    def _files(self) -> dict[str, Path]:
        """The files this configuration reads, found or not (gzip preferred over plain for aligned sets)."""
        if self.hparams.format == "tatoeba":
            return {"tatoeba": self.data_dir / f"{self._tatoeba_lang()}.txt"}
        if self.hparams.format == "hf":
            return {} if self.hparams.dataset else hf_source.local_files(self.data_dir, self._split_names())
        files = {}
        for split in SPLITS:
            prefix = self.hparams[f"{split}_prefix"]
            for lang in (self.hparams.src_lang, self.hparams.tgt_lang):
                gz, plain = self.data_dir / f"{prefix}.{lang}.gz", self.data_dir / f"{prefix}.{lang}"
                files[f"{split}.{lang}"] = plain if plain.exists() and not gz.exists() else gz
        return files

    def _download_missing(self) -> None:
        """Download missing files, or say which are missing and where they go."""
        missing = [p for p in self._files().values() if not p.exists()]
        if not missing or self.hparams.format == "hf":  # `datasets` downloads a hub dataset, or names what is missing
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

    def _tatoeba_splits(self) -> dict[str, list[Pair]]:
        """A Tatoeba file's pairs split here (files of this format hold at most a few hundred thousand pairs)."""
        if self._splits is None:
            h = self.hparams
            pairs = read_tatoeba(self._files()["tatoeba"])
            # Split in the file's (english, other) orientation so that cmn→en and en→cmn share a test set.
            splits = dict(zip(SPLITS, split_pairs(pairs, h.val_fraction, h.test_fraction, h.split_seed)))
            if h.src_lang not in ENGLISH:
                splits = {k: [(o, e) for e, o in v] for k, v in splits.items()}
            if not splits["train"]:
                raise CorpusFormatError(
                    f"{self._train_files()}: its {len(pairs)} pairs leave none for training after "
                    f"val_fraction={h.val_fraction} and test_fraction={h.test_fraction}"
                )
            self._splits = splits
        return self._splits

    def _iter_pairs(self, split: str) -> Iterator[Pair]:
        """The raw (source, target) pairs of `split`, streamed from the files where the format allows."""
        self._download_missing()
        h = self.hparams
        if h.format == "tatoeba":
            yield from self._tatoeba_splits()[split]
        elif h.format == "hf":
            yield from hf_source.iter_pairs(self._hf_splits()[split], h.src_lang, h.tgt_lang, self._split_source(split))
        else:
            files = self._files()
            yield from iter_aligned(files[f"{split}.{h.src_lang}"], files[f"{split}.{h.tgt_lang}"])

    def _pair_count(self, split: str) -> int | None:
        """How many pairs `split` has, when that is cheap to know before reading them (for a progress bar's
        time left): the lines of an uncompressed aligned file, counted in blocks; else None."""
        h = self.hparams
        if h.format != "aligned" or not is_terminal():
            return None
        path = self._files()[f"{split}.{h.src_lang}"]
        if path.suffix == ".gz":
            return None
        with open(path, "rb") as f:
            return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 24), b""))

    def _raw_pairs(self, split: str) -> list[Pair]:
        return list(self._iter_pairs(split))

    def _split_names(self) -> dict[str, str]:
        return {split: self.hparams[f"{split}_prefix"] for split in SPLITS}

    def _hf_splits(self) -> dict:
        """format=hf: our split name → a memory-mapped `datasets.Dataset` (loaded once)."""
        if self._splits is None:
            h = self.hparams
            self._splits = hf_source.load_splits(self.data_dir, h.dataset, h.dataset_config, self._split_names())
        return self._splits

    def _split_source(self, split: str) -> str:
        h = self.hparams
        if h.dataset:
            return f"{h.dataset} ({h.dataset_config}) split {h[f'{split}_prefix']}"
        return str(self._files().get(split, self.data_dir))

    def _train_files(self) -> str:
        """The file(s) the training pairs come from, for error messages."""
        files, h = self._files(), self.hparams
        if h.format == "tatoeba":
            return str(files["tatoeba"])
        if h.format == "hf":
            return self._split_source("train")
        return f"{files[f'train.{h.src_lang}']} and {files[f'train.{h.tgt_lang}']}"

    # -- the prepared corpus: tokenizers, then every split's ids (see cache.py and indexed.py) -------------

    def _cache_root(self) -> Path:
        return Path(self.hparams.cache_dir) if self.hparams.cache_dir else default_root(self.data_dir)

    def _source_key(self) -> dict:
        """What identifies the raw pairs of every split: the files, and how a Tatoeba file is split (computed
        once: the tokenizers' key and the ids' key both start from it)."""
        if self._source is not None:
            return self._source
        self._download_missing()
        h = self.hparams
        keys = ("format", "src_lang", "tgt_lang", "val_fraction", "test_fraction", "split_seed")
        if h.format == "hf":
            files = [hf_source.fingerprint(ds) for ds in self._hf_splits().values()]
        else:
            files = [file_fingerprint(p) for p in self._files().values()]
        self._source = {"files": files, **{k: h[k] for k in keys}}
        return self._source

    def _train_sample(self) -> tuple[list[str], list[str], str]:
        """Source and target sentences to train the tokenizers on: every training pair, or `tokenizer_sample`
        of them drawn uniformly (seed `split_seed`) from a larger corpus, as SentencePiece's input_sentence_size."""
        h = self.hparams
        n = sum(1 for _ in self._iter_pairs("train"))
        keep = None
        if n > h.tokenizer_sample:
            keep = np.zeros(n, dtype=bool)
            keep[np.random.default_rng(h.split_seed).choice(n, h.tokenizer_sample, replace=False)] = True
        src, tgt = [], []
        for i, (s, t) in enumerate(self._iter_pairs("train")):
            if keep is None or keep[i]:
                src.append(s)
                tgt.append(t)
        which = (
            f"all {n:,} training pairs"
            if keep is None
            else f"{len(src):,} of {n:,} training pairs drawn with seed {h.split_seed}"
        )
        return src, tgt, which

    def _tokenizers_key(self) -> dict:
        h = self.hparams
        settings = {k: h[k] for k in ("src_tokenizer", "tgt_tokenizer", "src_vocab_size", "tgt_vocab_size", "shared_vocab")}
        return {"source": self._source_key(), **settings, "tokenizer_sample": h.tokenizer_sample}

    def _tokenizers_folder(self) -> Path:
        return self._cache_root() / f"tokenizers-{digest(self._tokenizers_key())}"

    def _build_tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        if self._tokenizers is None:
            h = self.hparams
            key, folder = self._tokenizers_key(), self._tokenizers_folder()

            def train(tmp: Path) -> dict:
                start = time.monotonic()
                src, tgt, which = self._train_sample()
                if h.shared_vocab:  # one subword model for related languages (de–en): the model can tie all embeddings
                    shared = train_tokenizer(src + tgt, h.src_tokenizer, h.src_vocab_size, is_terminal())
                    toks = (shared, shared)
                else:
                    toks = (
                        train_tokenizer(src, h.src_tokenizer, h.src_vocab_size, is_terminal()),
                        train_tokenizer(tgt, h.tgt_tokenizer, h.tgt_vocab_size, is_terminal()),
                    )
                text = json.dumps({"src": toks[0].to_dict(), "tgt": toks[1].to_dict()})
                (tmp / TOKENIZERS_FILE).write_text(text)
                rank_zero_info(f"Tokenizers trained on {which} in {time.monotonic() - start:.0f} s: {folder}")
                return {"key": key, "sample": which, "sizes": {TOKENIZERS_FILE: len(text.encode())}}

            # A file of another size than recorded (cut short) makes the folder incomplete: it is built again.
            open_or_build(folder, train, lambda meta: meta.get("sizes", {}).items())
            path = folder / TOKENIZERS_FILE
            try:
                data = json.loads(path.read_text())
                self._tokenizers = (tokenizer_from_dict(data["src"]), tokenizer_from_dict(data["tgt"]))
            except (ValueError, KeyError, TypeError) as err:  # damaged in place: same size, other bytes
                raise DataCacheError(
                    f"the prepared tokenizers {path} are damaged ({type(err).__name__}: {str(err)[:80]}); "
                    f"delete {folder} and run again to prepare them anew"
                ) from None
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
        self._datasets, self._samplers, self._ids_path = None, {}, None

    @staticmethod
    def _encode_all(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
        # A subword tokenizer encodes a batch on all cores (Rust); the small word/char vocabularies one by one.
        return tok.encode_batch(texts) if isinstance(tok, SubwordTokenizer) else [tok.encode(t) for t in texts]

    def _ids_folder(self) -> Path:
        """The prepared ids of every split, built on first need (by one process of the node; see cache.py);
        found once per module (prepare_data, setup and prepared_files all ask)."""
        if self._ids_path is not None:
            return self._ids_path
        h = self.hparams
        src_tok, tgt_tok = self._build_tokenizers()
        tokenizers = digest({"src": src_tok.to_dict(), "tgt": tgt_tok.to_dict()})
        key = {"source": self._source_key(), "tokenizers": tokenizers, "max_len": h.max_len, "overlong": h.overlong}
        folder = self._cache_root() / f"ids-{digest(key)}"
        dtypes = (ids_dtype(len(src_tok)), ids_dtype(len(tgt_tok)))

        def expected_files(meta: dict):
            for split, stats in meta["splits"].items():
                for side, dtype in zip(("src", "tgt"), dtypes):
                    yield f"{split}.{side}.idx", 8 * (stats["pairs"] + 1)
                    yield f"{split}.{side}.bin", dtype.itemsize * stats[f"{side}_tokens"]

        def encode(tmp: Path) -> dict:
            start = time.monotonic()
            splits = {split: self._encode_split(split, tmp, dtypes) for split in SPLITS}
            rank_zero_info(f"Corpus encoded in {time.monotonic() - start:.0f} s: {folder}")
            return {"key": key, "splits": splits, "dtypes": [d.str for d in dtypes]}

        self._ids_meta = open_or_build(folder, encode, expected_files)
        self._ids_path = folder
        return folder

    def _encode_split(self, split: str, tmp: Path, dtypes: tuple[np.dtype, np.dtype]) -> dict:
        """Encode and frame `split` chunk by chunk into tmp/<split>.{src,tgt}.{bin,idx}. Overlong training pairs
        are dropped (or truncated with overlong="truncate"); validation and test pairs are always truncated,
        never dropped, so the evaluation sets stay whole."""
        h = self.hparams
        src_tok, tgt_tok = self._build_tokenizers()
        writers = [IndexedIdsWriter(tmp / f"{split}.{side}", dtype) for side, dtype in zip(("src", "tgt"), dtypes)]
        n_pairs = n_long = 0
        chunk: list[Pair] = []

        def flush() -> None:
            nonlocal n_long
            src_ids = self._encode_all(src_tok, [s for s, _ in chunk])
            tgt_ids = self._encode_all(tgt_tok, [t for _, t in chunk])
            src_len = np.fromiter(map(len, src_ids), dtype=np.int64, count=len(chunk))
            tgt_len = np.fromiter(map(len, tgt_ids), dtype=np.int64, count=len(chunk))
            # +1 for <eos> on the source, +2 for <bos>/<eos> on the target (see batching.frame_*).
            long = (src_len + 1 > h.max_len) | (tgt_len + 2 > h.max_len)
            n_long += int(long.sum())
            keep = np.ones(len(chunk), dtype=bool)
            if split == "train":
                if h.overlong == "drop":
                    keep &= ~long
                # An empty sentence (a blank line in an aligned corpus) teaches nothing: drop it from training.
                keep &= (src_len > 0) & (tgt_len > 0)
            writers[0].add_framed(src_ids, keep, h.max_len, tail=(EOS,))
            writers[1].add_framed(tgt_ids, keep, h.max_len, head=(BOS,), tail=(EOS,))
            chunk.clear()

        with StageBar(f"encoding {split}", self._pair_count(split)) as bar:
            for pair in self._iter_pairs(split):
                chunk.append(pair)
                n_pairs += 1
                if len(chunk) == ENCODE_CHUNK:
                    flush()
                    bar.update(ENCODE_CHUNK)
            bar.update(len(chunk))
            flush()
        (pairs, src_tokens), (_, tgt_tokens) = (w.close() for w in writers)
        if split == "train" and not pairs:
            raise CorpusFormatError(
                f"{self._train_files()}: none of the {n_pairs} training pairs is usable ({n_long} longer than "
                f"max_len={h.max_len}, the others with an empty side); raise max_len or set overlong=truncate"
            )
        return {"pairs": pairs, "read": n_pairs, "overlong": n_long, "src_tokens": src_tokens, "tgt_tokens": tgt_tokens}

    def prepared_files(self) -> list[str]:
        """What the prepared cache holds, a line per folder and split (scripts/prepare.py prints it)."""
        folder = self._ids_folder()
        lines = [f"tokenizers: {self._tokenizers_folder() / TOKENIZERS_FILE}", f"token ids: {folder}"]
        for split, stats in self._ids_meta["splits"].items():
            size = sum(p.stat().st_size for p in folder.glob(f"{split}.*"))
            lines.append(
                f"  {split}: {stats['pairs']:,} pairs of {stats['read']:,} read ({stats['overlong']:,} over max_len), "
                f"{stats['src_tokens']:,} + {stats['tgt_tokens']:,} tokens, {size / 2**20:,.1f} MiB"
            )
        return lines

    # -- loaders -------------------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Download missing files, train the tokenizers and encode every split into the cache, unless a
        complete cache exists (Lightning calls this on one process per node before `setup`)."""
        self._ids_folder()

    def setup(self, stage: str | None = None) -> None:
        """Memory-map every split of the prepared corpus (preparing it first if no process has)."""
        if self._datasets is not None:
            return
        folder = self._ids_folder()
        h, meta = self.hparams, self._ids_meta
        dtypes = [np.dtype(d) for d in meta["dtypes"]]
        self._datasets = {
            split: TokenPairs(IndexedIds(folder / f"{split}.src", dtypes[0]), IndexedIds(folder / f"{split}.tgt", dtypes[1]))
            for split in SPLITS
        }
        # Files changed in place after their build (same sizes, other bytes) must not feed the model ids
        # outside its vocabulary: one pass over the maps (about 0.5 s for 4.5M pairs; docs/results.md).
        sizes = (len(self.src_vocab), len(self.tgt_vocab))
        for data in self._datasets.values():
            for store, size in zip((data.src, data.tgt), sizes):
                store.check(size, f"delete {folder} and run again to prepare it anew")
        for split, stats in meta["splits"].items():
            action = "dropped" if split == "train" and h.overlong == "drop" else "truncated"
            data = self._datasets[split]
            batches = self._sampler(split).batches()
            waste = padding_waste(batches, data.src.lengths(), data.tgt.lengths())
            rank_zero_info(
                f"{split}: {stats['pairs']:,} pairs, {stats['overlong']:,} longer than max_len={h.max_len} {action}, "
                f"{len(batches):,} batches of ≤{h.max_tokens} tokens, padding waste {waste:.1%}"
            )

    def _sampler(self, split: str) -> TokenBudgetBatchSampler:
        """The split's batch sampler for this process, made once (its epoch's batches, drawn for the log at
        setup, then serve the loader: a WMT epoch takes a second or two to draw)."""
        world, rank = shard_of(self)
        key = (split, world, rank)
        if key not in self._samplers:
            self._samplers[key] = TokenBudgetBatchSampler(
                self._datasets[split].lengths(),
                self.hparams.max_tokens,
                shuffle=split == "train",
                num_replicas=world,
                rank=rank,
            )
        return self._samplers[key]

    def _loader(self, split: str) -> DataLoader:
        self.setup()
        # The training loader resumes mid-epoch (see resumable.py); evaluation loaders always run whole.
        loader_class = ResumableDataLoader if split == "train" else DataLoader
        batch_sampler = self._sampler(split)
        loader = loader_class(
            self._datasets[split],
            batch_sampler=batch_sampler,
            collate_fn=collated,
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
        """(source, target) strings of the training split: read into memory, so for small corpora only."""
        return self._raw_pairs("train")

    def val_pairs(self) -> list[Pair]:
        """(source, reference) strings of the validation split, untokenized, in file/split order."""
        return self._raw_pairs("val")

    def test_pairs(self) -> list[Pair]:
        """(source, reference) strings of the test split, untokenized: what BLEU is computed on."""
        return self._raw_pairs("test")
