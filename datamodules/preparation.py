"""Preparing a corpus, apart from any data module: the tokenizers trained on its training split, then every
split's token ids, each in a folder of the cache named by the digest of what it was made from (cache.py;
the ids' files: indexed.py). `PreparedCorpus` is what `ParallelCorpusDataModule` reads its splits from and
what scripts/prepare.py runs ahead of training.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from lightning.pytorch.utilities import rank_zero_info

from common.errors import CorpusFormatError, DataCacheError
from common.progress import StageBar, is_terminal

from .cache import default_root, digest, open_or_build
from .corpus_readers import Pair
from .indexed import IndexedIds, IndexedIdsWriter, TokenPairs, ids_dtype
from .sources import SPLITS, CorpusSource, corpus_source
from .tokenizers import SubwordTokenizer, tokenizer_from_dict, train_tokenizer
from .vocab import Tokenizer

TOKENIZERS_FILE = "tokenizers.json"  # in the prepared tokenizers' folder
ENCODE_CHUNK = 100_000  # pairs encoded at a time: bounds the memory of preparing a corpus of any size
# The settings that, with the files, identify the raw pairs of every split (the start of both folders' keys).
SOURCE_SETTINGS = ("format", "src_lang", "tgt_lang", "val_fraction", "test_fraction", "split_seed")


def cached_tokenizers(
    folder: Path, key: dict, train: Callable[[], tuple[Tokenizer, Tokenizer, str]]
) -> tuple[Tokenizer, Tokenizer]:
    """The (source, target) tokenizers kept in `folder`, made first by `train()` (which also says what they learnt
    from) unless the folder holds them complete. A file of another size than recorded (cut short) makes the folder
    incomplete: it is built again; one damaged in place (same size, other bytes) is one `DataCacheError`."""

    def build(tmp: Path) -> dict:
        start = time.monotonic()
        src, tgt, which = train()
        text = json.dumps({"src": src.to_dict(), "tgt": tgt.to_dict()})
        (tmp / TOKENIZERS_FILE).write_text(text)
        rank_zero_info(f"Tokenizers trained on {which} in {time.monotonic() - start:.0f} s: {folder}")
        return {"key": key, "sample": which, "sizes": {TOKENIZERS_FILE: len(text.encode())}}

    open_or_build(folder, build, lambda meta: meta.get("sizes", {}).items())
    path = folder / TOKENIZERS_FILE
    try:
        data = json.loads(path.read_text())
        return tokenizer_from_dict(data["src"]), tokenizer_from_dict(data["tgt"])
    except (ValueError, KeyError, TypeError) as err:
        raise DataCacheError(
            f"the prepared tokenizers {path} are damaged ({type(err).__name__}: {str(err)[:80]}); "
            f"delete {folder} and run again to prepare them anew"
        ) from None


class PreparedCorpus:
    """The tokenizers and token ids of the corpus that `settings` (`ParallelCorpusDataModule`'s arguments)
    describe, built on first need by one process of the node and found in the cache afterwards."""

    def __init__(self, settings: Mapping[str, Any], source: CorpusSource | None = None) -> None:
        self.settings = dict(settings)
        self.source = source or corpus_source(self.settings)
        cache_dir = self.settings["cache_dir"]
        self.cache_root, elsewhere = (Path(cache_dir), None) if cache_dir else default_root(self.source.data_dir)
        if elsewhere:
            rank_zero_info(elsewhere)
        self._source_key: dict | None = None
        self._tokenizers: tuple[Tokenizer, Tokenizer] | None = None
        self._ids: tuple[Path, dict] | None = None  # the ids' folder and its meta.json

    def source_key(self) -> dict:
        """What identifies the raw pairs of every split: the files, and how a Tatoeba file is split."""
        if self._source_key is None:
            files = self.source.fingerprint()
            self._source_key = {"files": files, **{k: self.settings[k] for k in SOURCE_SETTINGS}}
        return self._source_key

    # -- tokenizers ----------------------------------------------------------------------------------------

    def _tokenizers_key(self) -> dict:
        s = self.settings
        kinds = {k: s[k] for k in ("src_tokenizer", "tgt_tokenizer", "src_vocab_size", "tgt_vocab_size", "shared_vocab")}
        return {"source": self.source_key(), **kinds, "tokenizer_sample": s["tokenizer_sample"]}

    def tokenizers_folder(self) -> Path:
        return self.cache_root / f"tokenizers-{digest(self._tokenizers_key())}"

    def _train_sample(self) -> tuple[list[str], list[str], str]:
        """Source and target sentences to train the tokenizers on: every training pair, or `tokenizer_sample`
        of them drawn uniformly (seed `split_seed`) from a larger corpus, as SentencePiece's input_sentence_size."""
        sample, seed = self.settings["tokenizer_sample"], self.settings["split_seed"]
        n = sum(1 for _ in self.source.pairs("train"))
        keep = None
        if n > sample:
            keep = np.zeros(n, dtype=bool)
            keep[np.random.default_rng(seed).choice(n, sample, replace=False)] = True
        src, tgt = [], []
        for i, (s, t) in enumerate(self.source.pairs("train")):
            if keep is None or keep[i]:
                src.append(s)
                tgt.append(t)
        which = f"all {n:,} training pairs" if keep is None else f"{len(src):,} of {n:,} training pairs drawn with seed {seed}"
        return src, tgt, which

    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """The source and target tokenizers: given (`use_tokenizers`), found in the cache, or trained."""
        if self._tokenizers is None:
            s = self.settings

            def train() -> tuple[Tokenizer, Tokenizer, str]:
                src, tgt, which = self._train_sample()
                if s["shared_vocab"]:  # one subword model for related languages (de–en): the model can tie all embeddings
                    shared = train_tokenizer(src + tgt, s["src_tokenizer"], s["src_vocab_size"], is_terminal())
                    return shared, shared, which
                return (
                    train_tokenizer(src, s["src_tokenizer"], s["src_vocab_size"], is_terminal()),
                    train_tokenizer(tgt, s["tgt_tokenizer"], s["tgt_vocab_size"], is_terminal()),
                    which,
                )

            self._tokenizers = cached_tokenizers(self.tokenizers_folder(), self._tokenizers_key(), train)
        return self._tokenizers

    def use_tokenizers(self, data: dict) -> None:
        """Use given tokenizers (`{"src": …, "tgt": …}`, e.g. a checkpoint's) instead of training new ones."""
        self._tokenizers = (tokenizer_from_dict(data["src"]), tokenizer_from_dict(data["tgt"]))
        self._ids = None

    # -- token ids -----------------------------------------------------------------------------------------

    def ids(self) -> tuple[Path, dict]:
        """The folder of every split's prepared ids and its meta.json, built on first need (by one process of
        the node; see cache.py)."""
        if self._ids is not None:
            return self._ids
        s = self.settings
        src_tok, tgt_tok = self.tokenizers()
        tokenizers = digest({"src": src_tok.to_dict(), "tgt": tgt_tok.to_dict()})
        key = {"source": self.source_key(), "tokenizers": tokenizers, "max_len": s["max_len"], "overlong": s["overlong"]}
        folder = self.cache_root / f"ids-{digest(key)}"
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

        self._ids = (folder, open_or_build(folder, encode, expected_files))
        return self._ids

    @staticmethod
    def _encode_all(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
        # A subword tokenizer encodes a batch on all cores (Rust); the small word/char vocabularies one by one.
        return tok.encode_batch(texts) if isinstance(tok, SubwordTokenizer) else [tok.encode(t) for t in texts]

    def _encode_split(self, split: str, tmp: Path, dtypes: tuple[np.dtype, np.dtype]) -> dict:
        """Encode and frame `split` chunk by chunk into tmp/<split>.{src,tgt}.{bin,idx}. Overlong training pairs
        are dropped (or truncated with overlong="truncate"); validation and test pairs are always truncated,
        never dropped, so the evaluation sets stay whole."""
        max_len, overlong = self.settings["max_len"], self.settings["overlong"]
        src_tok, tgt_tok = self.tokenizers()
        writers = [IndexedIdsWriter(tmp / f"{split}.{side}", dtype) for side, dtype in zip(("src", "tgt"), dtypes)]
        n_pairs = n_long = n_empty = 0
        chunk: list[Pair] = []

        def flush() -> None:
            nonlocal n_long, n_empty
            src_ids = self._encode_all(src_tok, [s for s, _ in chunk])
            tgt_ids = self._encode_all(tgt_tok, [t for _, t in chunk])
            src_len = np.fromiter(map(len, src_ids), dtype=np.int64, count=len(chunk))
            tgt_len = np.fromiter(map(len, tgt_ids), dtype=np.int64, count=len(chunk))
            # +1 for <eos> on the source, +2 for <bos>/<eos> on the target (see batching.frame_*).
            long = (src_len + 1 > max_len) | (tgt_len + 2 > max_len)
            n_long += int(long.sum())
            keep = np.ones(len(chunk), dtype=bool)
            if split == "train":
                if overlong == "drop":
                    keep &= ~long
                # An empty sentence (a blank line in an aligned corpus) teaches nothing: drop it from training.
                empty = (src_len == 0) | (tgt_len == 0)
                n_empty += int((keep & empty).sum())  # said with the counts (corpus.py), never dropped silently
                keep &= ~empty
            # The tokenizers' own specials: ours are BOS/EOS, an imported Marian model's <pad> and </s>.
            writers[0].add_framed(src_ids, keep, max_len, tail=(src_tok.eos_id,))
            writers[1].add_framed(tgt_ids, keep, max_len, head=(tgt_tok.bos_id,), tail=(tgt_tok.eos_id,))
            chunk.clear()

        with StageBar(f"encoding {split}", self.source.count(split) if is_terminal() else None) as bar:
            for pair in self.source.pairs(split):
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
                f"{self.source.describe()}: none of the {n_pairs} training pairs is usable ({n_long} longer than "
                f"max_len={max_len}, the others with an empty side); raise max_len or set overlong=truncate"
            )
        return {
            "pairs": pairs, "read": n_pairs, "overlong": n_long, "empty": n_empty, "src_tokens": src_tokens,
            "tgt_tokens": tgt_tokens,
        }  # fmt: skip

    def splits(self) -> dict[str, TokenPairs]:
        """Every split's prepared pairs, memory-mapped (prepared first if no process has), checked against the
        vocabularies: files changed in place after their build (same sizes, other bytes) must not feed the model ids
        outside them. One pass over the maps: about 0.5 s for 4.5M pairs (docs/results/data-scale.md)."""
        folder, meta = self.ids()
        src_tok, tgt_tok = self.tokenizers()
        dtypes = [np.dtype(d) for d in meta["dtypes"]]
        # An imported Marian model's <pad> is its last id: the target tokenizer's pad_id, not PAD.
        sides = lambda split: (IndexedIds(folder / f"{split}.{side}", dtype) for side, dtype in zip(("src", "tgt"), dtypes))  # noqa: E731
        datasets = {split: TokenPairs(*sides(split), tgt_tok.pad_id) for split in SPLITS}
        for data in datasets.values():
            for store, size in zip((data.src, data.tgt), (len(src_tok), len(tgt_tok))):
                store.check(size, f"delete {folder} and run again to prepare it anew")
        return datasets

    def prepare(self) -> None:
        """Download missing files, train the tokenizers and encode every split into the cache, unless a
        complete cache exists."""
        self.ids()

    def describe(self) -> list[str]:
        """What the prepared cache holds, a line per folder and split (scripts/prepare.py prints it)."""
        folder, meta = self.ids()
        lines = [f"tokenizers: {self.tokenizers_folder() / TOKENIZERS_FILE}", f"token ids: {folder}"]
        for split, stats in meta["splits"].items():
            size = sum(p.stat().st_size for p in folder.glob(f"{split}.*"))
            lines.append(
                f"  {split}: {stats['pairs']:,} pairs of {stats['read']:,} read ({stats['overlong']:,} over max_len, "
                f"{stats.get('empty', 0):,} with an empty side), "
                f"{stats['src_tokens']:,} + {stats['tgt_tokens']:,} tokens, {size / 2**20:,.1f} MiB"
            )
        return lines
