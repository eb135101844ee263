"""Real parallel corpora: Tatoeba/manythings (one file, e.g. Chinese–English) and line-aligned sets (Multi30k).

Batches hold a token budget rather than a fixed number of sentences, as in the paper (~25k source
and target tokens per batch): short sentences then ride in big batches, long ones in small batches,
and grouping similar lengths keeps padding low.
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
import random
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import Iterator, Literal, Sequence, get_args

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Sampler

from .batching import collate_pairs, frame_source, frame_target
from .checks import at_least, check_hparams, fraction, no_more_than, one_of
from .errors import CorpusFormatError, DataNotFoundError, HyperparameterError
from .resumable import ResumableDataLoader, shard_of
from .tokenizers import SubwordTokenizer, TokenizerKind, train_tokenizer
from .vocab import SPECIAL_TOKENS, Tokenizer, tokenizer_from_dict

Pair = tuple[str, str]
ENGLISH = ("en", "eng")
SPLITS = ("train", "val", "test")
TATOEBA_URL = "https://www.manythings.org/anki/{lang}-eng.zip"
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"


# ---------------------------------------------------------------------------------------------- readers


def read_tatoeba(path: str | os.PathLike) -> list[Pair]:
    """(english, other) pairs from a manythings file: `english<TAB>other<TAB>attribution` per line.

    The byte-order mark the published files start with is dropped (it would otherwise glue itself to
    the first English sentence); blank lines are skipped; anything else malformed is an error with its
    line number, because silently skipping it would shift nothing but hide a broken download. So is a
    file that is not UTF-8 text or holds no pair at all.
    """
    pairs = []
    for lineno, line in enumerate(io.StringIO(_read_text(Path(path)), newline=None), 1):
        if not line.strip():
            continue
        fields = line.rstrip("\n").split("\t")
        if len(fields) < 2:
            raise CorpusFormatError(f"{path}, line {lineno}: expected 'english<TAB>translation', found no tab")
        english, other = fields[0].strip(), fields[1].strip()
        if not english or not other:
            raise CorpusFormatError(f"{path}, line {lineno}: empty sentence in 'english<TAB>translation'")
        pairs.append((english, other))
    if not pairs:
        raise CorpusFormatError(f"{path}: no sentence pairs in it ({_emptiness(path)})")
    return pairs


def _read_text(path: Path) -> str:
    """The whole file (gunzipped if the name ends in .gz) as UTF-8 text without a byte-order mark, or one
    `CorpusFormatError` naming the file: not gzip, truncated, or not UTF-8 (with the line and byte offset)."""
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError; a truncated gzip an EOFError
        what = "not a readable gzip file, truncated or corrupt" if path.suffix == ".gz" and path.is_file() else "unreadable"
        raise CorpusFormatError(f"{path}: {what} ({getattr(err, 'strerror', None) or err})") from None
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as err:
        offset = bom + err.start
        line = data.count(b"\n", 0, offset) + 1
        gunzipped = " of the gunzipped text" if path.suffix == ".gz" else ""
        utf16 = ", it is UTF-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else ""
        raise CorpusFormatError(
            f"{path}, line {line} (byte offset {offset}{gunzipped}): not UTF-8 text "
            f"(byte 0x{data[offset]:02x}: {err.reason}{utf16}); save the file as UTF-8"
        ) from None


def _read_lines(path: Path) -> list[str]:
    """The file's lines, stripped (a line ends at LF, CRLF or CR)."""
    return [line.strip() for line in io.StringIO(_read_text(path), newline=None)]


def _emptiness(path: Path) -> str:
    return "it holds no text" if not _read_text(path) else "it holds only blank lines"


def read_aligned(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> list[Pair]:
    """(source, target) pairs from two line-aligned files (gzip if the name ends in .gz): line i ↔ line i."""
    src, tgt = _read_lines(Path(src_path)), _read_lines(Path(tgt_path))
    for path, lines in ((src_path, src), (tgt_path, tgt)):
        if not any(lines):
            raise CorpusFormatError(f"{path}: no sentences in it ({_emptiness(Path(path))})")
    if len(src) != len(tgt):
        raise CorpusFormatError(
            f"Line-aligned files differ in length: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    return list(zip(src, tgt))


def split_pairs(
    pairs: Sequence[Pair], val_fraction: float, test_fraction: float, seed: int
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Random train/val/test split in which every copy of a repeated pair lands in the same split.

    Tatoeba repeats pairs (and "Hi." → "你好。" in train with the same pair in test would reward
    memorising), so whole groups of identical pairs are shuffled and cut, not single lines.
    """
    groups: dict[Pair, list[Pair]] = {}
    for p in pairs:
        groups.setdefault(p, []).append(p)
    keys = list(groups)  # first-appearance order: the same file and seed always give the same split
    random.Random(seed).shuffle(keys)
    n_test, n_val = round(test_fraction * len(keys)), round(val_fraction * len(keys))
    cut = lambda ks: [p for k in ks for p in groups[k]]  # noqa: E731
    return cut(keys[n_test + n_val :]), cut(keys[n_test : n_test + n_val]), cut(keys[:n_test])


def _download(url: str, dest: Path) -> None:
    """Fetch `url` to `dest` through a temporary name, so an interrupted download never looks complete."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    # manythings.org refuses urllib's default user agent.
    req = urllib.request.Request(url, headers={"User-Agent": "Mozilla/5.0 (transformer-lightning)"})
    tmp = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(req, timeout=30) as r, open(tmp, "wb") as f:
            f.write(r.read())
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------- batching


class _EpochSetter:
    """Lightning calls `set_epoch` on `dataloader.batch_sampler.sampler`, never on the batch sampler itself."""

    def __init__(self, owner: "TokenBudgetBatchSampler"):
        self.owner = owner

    def set_epoch(self, epoch: int) -> None:
        self.owner.set_epoch(epoch)


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of example indices whose padded size `len(batch) * max(lengths in batch)` stays ≤ `max_tokens`.

    Examples are sorted by length and packed greedily, so a batch holds similar lengths (little padding).
    With `shuffle`, equal lengths are ordered at random before packing and the batches are shuffled,
    both from seed + epoch (Lightning calls `set_epoch`): batch contents and order change every epoch.
    Shuffled buckets (fairseq's way) would mix more, but they change the number of batches from epoch
    to epoch, and Lightning fixes that number at setup: an epoch one batch short would skip validation.
    Sorting everything keeps the sequence of lengths, hence the packing and the count, identical.
    Without `shuffle`: the same batches, in length order, every time.
    With `num_replicas` > 1 each rank takes every `num_replicas`-th batch, all ranks the same count.
    The next pass leaves out its first `skip` batches (set by `resumable.ResumableDataLoader` on resume).
    """

    skip = 0

    def __init__(
        self,
        lengths: Sequence[int],
        max_tokens: int,
        shuffle: bool = False,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        if lengths and max(lengths) > max_tokens:
            raise ValueError(f"An example of {max(lengths)} tokens cannot fit a token budget of {max_tokens}")
        self.lengths = list(lengths)
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0
        self.sampler = _EpochSetter(self)
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        """This epoch's batches for this rank (computed once per epoch: `len` and `iter` must agree)."""
        if self._cache is not None and self._cache[0] == self.epoch:
            return self._cache[1]
        rng = random.Random(self.seed + self.epoch)
        order = list(range(len(self.lengths)))
        if self.shuffle:
            rng.shuffle(order)
        order.sort(key=self.lengths.__getitem__)  # stable: equal lengths keep their shuffled order
        out: list[list[int]] = []
        batch: list[int] = []
        for i in order:  # lengths ascend, so the newest example is the batch's longest
            if batch and self.lengths[i] * (len(batch) + 1) > self.max_tokens:
                out.append(batch)
                batch = []
            batch.append(i)
        if batch:
            out.append(batch)
        if self.shuffle:
            rng.shuffle(out)
        if self.num_replicas > 1 and out:
            # Equal counts per rank or DDP hangs on the last step: training drops the remainder (other
            # batches next epoch), evaluation repeats the first batches so nothing is left out.
            n = len(out) // self.num_replicas if self.shuffle else -(-len(out) // self.num_replicas)
            out = [out[i % len(out)] for i in range(n * self.num_replicas)][self.rank :: self.num_replicas]
        self._cache = (self.epoch, out)
        return out

    def __iter__(self) -> Iterator[list[int]]:
        skip, self.skip = self.skip, 0
        return iter(self.batches()[skip:])

    def __len__(self) -> int:
        return len(self.batches())


def padding_waste(batches: Sequence[Sequence[int]], src_lens: Sequence[int], tgt_lens: Sequence[int]) -> float:
    """Fraction of the padded source+target positions that are padding."""
    real = padded = 0
    for b in batches:
        real += sum(src_lens[i] + tgt_lens[i] for i in b)
        padded += len(b) * (max(src_lens[i] for i in b) + max(tgt_lens[i] for i in b))
    return 1 - real / padded if padded else 0.0


# ---------------------------------------------------------------------------------------------- data module


class ParallelCorpusDataModule(L.LightningDataModule):
    """Sentence pairs from a Tatoeba file (split here) or line-aligned files (splits given), token-budget batches.

    Defaults: Tatoeba Chinese→English, Chinese as characters, English as BPE. For Multi30k use
    `data_dir=../shared/data/multi30k, format=aligned, src_lang=de, tgt_lang=en`.
    `__init__` reads nothing; the files are read (and downloaded if allowed) on first need, and the
    tokenizers are trained on the training split the first time `tokenizers` is read.
    """

    def __init__(
        self,
        data_dir: str = "../shared/data/cmn-eng",
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
        seed: int = 42,
        num_workers: int = 0,
        download: bool = True,
    ):
        super().__init__()
        kinds = one_of(get_args(TokenizerKind))
        check_hparams(self, locals(), {
            "format": one_of(("tatoeba", "aligned")), "src_tokenizer": kinds, "tgt_tokenizer": kinds,
            "src_vocab_size": at_least(len(SPECIAL_TOKENS) + 1), "tgt_vocab_size": at_least(len(SPECIAL_TOKENS) + 1),
            "max_tokens": at_least(3), "max_len": at_least(3), "overlong": one_of(("drop", "truncate")),
            "val_fraction": fraction, "test_fraction": fraction, "num_workers": at_least(0),
        }, no_more_than("max_len", "max_tokens"), lambda h: (held_out := h["val_fraction"] + h["test_fraction"]) < 1
            or f"val_fraction + test_fraction = {held_out:g} leaves nothing for training")
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
                _download(url, dest)
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
                splits = dict(zip(SPLITS, split_pairs(pairs, h.val_fraction, h.test_fraction, h.seed)))
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
            seed=self.hparams.seed,
            num_replicas=world,
            rank=rank,
        )

    def _loader(self, split: str) -> DataLoader:
        self.setup()
        # A custom batch sampler does its own DDP sharding: run multi-GPU with Trainer(use_distributed_sampler=False).
        # The training loader resumes mid-epoch (see resumable.py); evaluation loaders always run whole.
        loader_class = ResumableDataLoader if split == "train" else DataLoader
        return loader_class(
            self._encoded[split],
            batch_sampler=self._sampler(split),
            collate_fn=collate_pairs,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

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
