"""Hugging Face `datasets` translation corpora (`{"translation": {"de": ..., "en": ...}}` an example) as a source of
sentence pairs, from the hub or local files; `datasets` is imported only here, only when such a source is used
(docs/guide/data.md, "Sources")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from common.errors import CorpusFormatError, DataNotFoundError
from common.network import answers

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow"}
BATCH = 10_000  # examples read from Arrow at a time


def local_files(data_dir: Path, split_names: dict[str, str]) -> dict[str, Path]:
    """Our split name → the file holding that split in `data_dir` (`<split name>.<ext>`), found or not."""
    out = {}
    for split, name in split_names.items():
        found = [data_dir / f"{name}{ext}" for ext in LOCAL_FORMATS if (data_dir / f"{name}{ext}").exists()]
        out[split] = found[0] if found else data_dir / f"{name}.jsonl"
    return out


def load_splits(data_dir: Path, dataset: str | None, config: str | None, split_names: dict[str, str]) -> dict:
    """Our split name ("train", "val", "test") → a `datasets.Dataset`."""
    try:
        import datasets
    except ImportError:
        raise DataNotFoundError("format=hf reads Hugging Face datasets: pip install datasets") from None
    datasets.disable_progress_bars()
    if dataset:
        offline = hub_offline_reason()
        try:
            with _offline(datasets) if offline else contextlib.nullcontext():
                return {split: datasets.load_dataset(dataset, config, split=name) for split, name in split_names.items()}
        except (FileNotFoundError, ConnectionError, ValueError) as err:
            why = str(err).splitlines()[0]
            if offline:
                why = f"{offline}, and it is not in Hugging Face's cache (read it once online, or give local files)"
            raise DataNotFoundError(f"Hugging Face dataset {dataset!r} ({config}): {why}") from None
    if (data_dir / "dataset_dict.json").exists():
        saved = datasets.load_from_disk(str(data_dir))
        missing = [name for name in split_names.values() if name not in saved]
        if missing:
            raise DataNotFoundError(f"{data_dir}: the saved dataset has no split {', '.join(missing)} (it has {list(saved)})")
        return {split: saved[name] for split, name in split_names.items()}
    files = local_files(data_dir, split_names)
    missing = [p for p in files.values() if not p.exists()]
    if missing:
        raise DataNotFoundError(
            f"{', '.join(p.name for p in missing)} not found in {data_dir}/: put each split there as "
            f'<split>.jsonl (or .json, .parquet, .arrow) of {{"translation": {{"<src>": ..., "<tgt>": ...}}}} rows, '
            "or give --data.dataset a Hugging Face hub name (e.g. wmt14) and --data.dataset_config (e.g. de-en)"
        )
    out = {}
    for split, path in files.items():
        try:
            out[split] = datasets.load_dataset(LOCAL_FORMATS[path.suffix], data_files=str(path), split="train")
        except Exception as err:  # the builders raise many kinds (ArrowInvalid, DatasetGenerationError, ...)
            raise CorpusFormatError(
                f"{path}: not readable as {LOCAL_FORMATS[path.suffix]} ({str(err).splitlines()[0]})"
            ) from None
    return out


def hub_offline_reason() -> str | None:
    """Why the Hugging Face hub is not to be asked (HF_HUB_OFFLINE is set, or it does not answer within ~2 s), or
    None. Unasked, `datasets` reads a dataset downloaded before from its cache at once; asked while offline, it
    would retry five times over half a minute first."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    return None if answers(constants.ENDPOINT) else f"{constants.ENDPOINT} does not answer (offline?)"


@contextlib.contextmanager
def _offline(datasets):
    """Hugging Face's offline mode for the block, as HF_HUB_OFFLINE=1 at start-up would set it (both libraries
    read the variable once, when imported)."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = before


def iter_pairs(ds, src_lang: str, tgt_lang: str, where: str) -> Iterator[tuple[str, str]]:
    """(source, target) strings of a `datasets.Dataset` in the translation layout, streamed in batches."""
    if "translation" not in ds.column_names:
        raise CorpusFormatError(f"{where}: no 'translation' column (columns: {', '.join(ds.column_names)})")
    row = 0
    for batch in ds.iter(batch_size=BATCH):
        for pair in batch["translation"]:
            row += 1
            try:
                yield pair[src_lang].strip(), pair[tgt_lang].strip()
            except (KeyError, TypeError, AttributeError):
                langs = sorted(pair) if isinstance(pair, dict) else type(pair).__name__
                raise CorpusFormatError(
                    f"{where}, row {row}: needs translation.{src_lang} and .{tgt_lang} strings, found {langs}"
                ) from None


def fingerprint(ds) -> str:
    """`datasets`' own hash of a loaded dataset: its source files or hub revision and every transform."""
    return ds._fingerprint
