"""Where a corpus's raw sentence pairs come from: one small class per kind of source (`TatoebaFile`, `AlignedFiles`,
`HFDataset`) behind one interface (`CorpusSource`), made from a data module's settings by `corpus_source`
(docs/guide/data.md, "Sources")."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from common.errors import CorpusFormatError, DataNotFoundError

from . import hf_source
from .cache import file_fingerprint
from .corpus_readers import Pair, download, iter_aligned, read_tatoeba, split_pairs

ENGLISH = ("en", "eng")
SPLITS = ("train", "val", "test")
TATOEBA_URL = "https://www.manythings.org/anki/{lang}-eng.zip"
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}"
DOWNLOAD_FLAG = "--data.download true"  # the recipes' flag (scripts/fit.py, scripts/prepare.py); download=True in Python


class CorpusSource:
    """The (source, target) string pairs of the splits "train", "val" and "test". Missing files are
    downloaded on first need when `download` allows and the source knows where from; otherwise
    `DataNotFoundError` says which are missing and where they go."""

    def __init__(self, data_dir: Path, src_lang: str, tgt_lang: str, download: bool = True) -> None:
        self.data_dir, self.src_lang, self.tgt_lang, self.download = Path(data_dir), src_lang, tgt_lang, download

    def files(self) -> dict[str, Path]:
        """The files this source reads, found or not."""
        raise NotImplementedError

    def pairs(self, split: str) -> Iterator[Pair]:
        """The raw pairs of `split`, streamed from the files where the source allows."""
        raise NotImplementedError

    def describe(self, split: str = "train") -> str:
        """Where `split` comes from, for error messages."""
        raise NotImplementedError

    def fingerprint(self) -> list:
        """What identifies the pairs: every file's size and modification time (cache.py's `file_fingerprint`)."""
        self.fetch()
        return [file_fingerprint(p) for p in self.files().values()]

    def count(self, split: str) -> int | None:
        """How many pairs `split` has, when that is cheap to know before reading them; else None."""
        return None

    def fetch(self) -> None:
        """Download missing files, or say which are missing and where they go."""


class TatoebaFile(CorpusSource):
    """A Tatoeba file, split here into train/val/test (`val_fraction`, `test_fraction`, seed `split_seed`),
    in the file's (English, other) orientation, so that cmn→en and en→cmn share a test set. Files of this
    format hold at most a few hundred thousand pairs: they are read into memory once."""

    def __init__(self, *args, val_fraction: float, test_fraction: float, split_seed: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.val_fraction, self.test_fraction, self.split_seed = val_fraction, test_fraction, split_seed
        self.lang = self.tgt_lang if self.src_lang in ENGLISH else self.src_lang
        self._splits: dict[str, list[Pair]] | None = None

    def files(self) -> dict[str, Path]:
        return {"tatoeba": self.data_dir / f"{self.lang}.txt"}

    def describe(self, split: str = "train") -> str:
        return str(self.files()["tatoeba"])

    def fetch(self) -> None:
        path = self.files()["tatoeba"]
        if path.exists():
            return
        url = TATOEBA_URL.format(lang=self.lang)
        how = f"{path} not found: download {url} and unzip {path.name} into {self.data_dir}/"
        if not self.download:
            raise DataNotFoundError(f"{how}, or let it download on a machine that is online: {DOWNLOAD_FLAG}")
        archive = self.data_dir / f"{self.lang}-eng.zip"
        try:
            download(url, archive)
            with zipfile.ZipFile(archive) as z:
                z.extract(path.name, self.data_dir)
            archive.unlink()
        except (OSError, zipfile.BadZipFile, KeyError) as e:
            raise DataNotFoundError(f"{how} (downloading {url} failed: {e})") from None

    def pairs(self, split: str) -> Iterator[Pair]:
        if self._splits is None:
            self.fetch()
            pairs = read_tatoeba(self.files()["tatoeba"])
            splits = dict(zip(SPLITS, split_pairs(pairs, self.val_fraction, self.test_fraction, self.split_seed)))
            if self.src_lang not in ENGLISH:
                splits = {k: [(o, e) for e, o in v] for k, v in splits.items()}
            if not splits["train"]:
                raise CorpusFormatError(
                    f"{self.describe()}: its {len(pairs)} pairs leave none for training after "
                    f"val_fraction={self.val_fraction} and test_fraction={self.test_fraction}"
                )
            self._splits = splits
        yield from self._splits[split]


class AlignedFiles(CorpusSource):
    """`<prefix>.<lang>` files per split, gzip (preferred) or plain, line i of the source file translating
    line i of the target file; the splits' prefixes are given (`{"train": "train", "val": "val", ...}`)."""

    def __init__(self, *args, prefixes: Mapping[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.prefixes = dict(prefixes)

    def files(self) -> dict[str, Path]:
        files = {}
        for split in SPLITS:
            for lang in (self.src_lang, self.tgt_lang):
                gz, plain = self.data_dir / f"{self.prefixes[split]}.{lang}.gz", self.data_dir / f"{self.prefixes[split]}.{lang}"
                files[f"{split}.{lang}"] = plain if plain.exists() and not gz.exists() else gz
        return files

    def describe(self, split: str = "train") -> str:
        files = self.files()
        return f"{files[f'{split}.{self.src_lang}']} and {files[f'{split}.{self.tgt_lang}']}"

    def fetch(self) -> None:
        missing = [p for p in self.files().values() if not p.exists()]
        if not missing:
            return
        # A prefix with a folder in it (distilled/train) is a corpus of the user's: named whole, never downloaded
        # (Multi30k's own train.de.gz in its place would train on another corpus without a word).
        names = [str(p.relative_to(self.data_dir)) if p.is_relative_to(self.data_dir) else str(p) for p in missing]
        how = (
            f"{', '.join(names)} not found in {self.data_dir}/: put them there "
            f"(gzip or plain text, line i of .{self.src_lang} translating line i of .{self.tgt_lang})"
        )
        if any(p.parent != self.data_dir for p in missing):
            inside = [p.relative_to(self.data_dir) for p in missing if p.is_relative_to(self.data_dir)]
            here = [p for p in inside if p.exists() or (p.suffix == ".gz" and p.with_suffix("").exists())]
            hint = (
                f" (a prefix is read inside the data folder: for the files in ./{here[0].parent}/ give its absolute path)"
                if here
                else ""
            )
            raise DataNotFoundError(how + hint)
        if not self.download:
            raise DataNotFoundError(f"{how}, or let it download on a machine that is online: {DOWNLOAD_FLAG}")
        for path in missing:
            url = MULTI30K_URL.format(name=path.name)
            try:
                download(url, path)
            except OSError as e:
                raise DataNotFoundError(f"{how} (downloading {url} failed: {e})") from None

    def pairs(self, split: str) -> Iterator[Pair]:
        self.fetch()
        files = self.files()
        yield from iter_aligned(files[f"{split}.{self.src_lang}"], files[f"{split}.{self.tgt_lang}"])

    def count(self, split: str) -> int | None:
        """The lines of an uncompressed source file, counted in blocks (for a progress bar's time left)."""
        path = self.files()[f"{split}.{self.src_lang}"]
        if path.suffix == ".gz":
            return None
        with open(path, "rb") as f:
            return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 24), b""))


class HFDataset(CorpusSource):
    """A `datasets` translation corpus: `dataset` (and `config`) from the hub, downloaded by `datasets` into
    its own cache, or, with `dataset=None`, local files in `data_dir` (see hf_source.py); the splits' names
    are given. Each split is memory-mapped Arrow, loaded once."""

    def __init__(self, *args, dataset: str | None, config: str | None, split_names: Mapping[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.dataset, self.config, self.split_names = dataset, config, dict(split_names)
        self._splits: dict | None = None

    def files(self) -> dict[str, Path]:
        return {} if self.dataset else hf_source.local_files(self.data_dir, self.split_names)

    def describe(self, split: str = "train") -> str:
        if self.dataset:
            return f"{self.dataset} ({self.config}) split {self.split_names[split]}"
        return str(self.files().get(split, self.data_dir))

    def _loaded(self) -> dict:
        if self._splits is None:
            self._splits = hf_source.load_splits(self.data_dir, self.dataset, self.config, self.split_names)
        return self._splits

    def fingerprint(self) -> list:
        return [hf_source.fingerprint(ds) for ds in self._loaded().values()]

    def pairs(self, split: str) -> Iterator[Pair]:
        yield from hf_source.iter_pairs(self._loaded()[split], self.src_lang, self.tgt_lang, self.describe(split))


def corpus_source(settings: Mapping) -> CorpusSource:
    """The source that a data module's settings (`ParallelCorpusDataModule`'s arguments) describe."""
    s = settings
    common = {"data_dir": Path(s["data_dir"]), "src_lang": s["src_lang"], "tgt_lang": s["tgt_lang"], "download": s["download"]}
    names = {split: s[f"{split}_prefix"] for split in SPLITS}
    if s["format"] == "tatoeba":
        return TatoebaFile(**common, val_fraction=s["val_fraction"], test_fraction=s["test_fraction"], split_seed=s["split_seed"])
    if s["format"] == "aligned":
        return AlignedFiles(**common, prefixes=names)
    return HFDataset(**common, dataset=s["dataset"], config=s["dataset_config"], split_names=names)
